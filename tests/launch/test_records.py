"""The launcher's records are cheap to define: `paddlike.launch.NamedTuple` behaves like
`typing.NamedTuple`, the run summary's records round-trip through JSON unchanged, and a
one-node launch never imports `typing` or `dataclasses` (their import and class
creation were most of the launcher's start-up)."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import pytest

from paddlike.launch import NamedTuple
from paddlike.summary import ProcessRecord, RootCause, RunSummary


class Point(NamedTuple):
    """A point on a line of nodes."""

    x: int
    label: str = ""

    @property
    def doubled(self) -> int:
        return 2 * self.x

    def named(self) -> str:
        return f"{self.label or 'p'}{self.x}"


def test_a_record_keeps_its_fields_defaults_methods_and_docstring() -> None:
    p = Point(3)
    assert (p.x, p.label, p.doubled, p.named()) == (3, "", 6, "p3")
    assert Point(x=1, label="n") == Point(1, "n")
    assert Point._fields == ("x", "label")
    assert repr(Point(1, "n")) == "Point(x=1, label='n')"
    assert Point.__doc__ == "A point on a line of nodes."
    assert Point.__qualname__ == "Point"
    assert Point.__module__ == __name__


def test_a_record_is_immutable_and_replace_gives_a_changed_copy() -> None:
    p = Point(1, "a")
    with pytest.raises(AttributeError):
        p.x = 2  # type: ignore[misc]
    assert p._replace(x=2) == Point(2, "a")
    assert p == Point(1, "a")
    assert p._asdict() == {"x": 1, "label": "a"}


def test_a_record_is_built_from_positions_keywords_and_defaults_like_a_namedtuple() -> None:
    assert Point(label="n", x=2) == (2, "n")
    assert Point._make([4, "m"]) == Point(4, "m")
    assert Point._field_defaults == {"label": ""}
    assert pickle.loads(pickle.dumps(Point(5, "q"))) == Point(5, "q")
    with pytest.raises(TypeError, match="missing required argument: 'x'"):
        Point(label="n")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="multiple values for argument 'x'"):
        Point(1, x=2)  # type: ignore[misc]
    with pytest.raises(TypeError, match="unexpected keyword 'y'"):
        Point(1, y=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="takes 2 arguments but 3 were given"):
        Point(1, "a", 3)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="unexpected field names"):
        Point(1)._replace(y=2)


def test_a_field_without_a_default_after_one_with_a_default_is_refused() -> None:
    with pytest.raises(TypeError, match="'y' without a default follows"):

        class Bad(NamedTuple):
            x: int = 0
            y: int


def test_a_summary_round_trips_through_json_in_the_schemas_key_order() -> None:
    record = ProcessRecord("trainer", 1, 1, "127.0.0.1", "workerlog.1", pid=7, exit_code=3)
    cause = RootCause("trainer rank 1 exited with code 3", tail=["boom"], exit_code=3)
    summary = RunSummary(
        "job-1", "collective", 0, 1, "127.0.0.1", "vm", "/log", 1.5, "failed", 3,
        processes=[record], root_cause=cause,
    )  # fmt: skip
    data = json.loads(json.dumps(summary.to_json()))
    assert list(data) == [
        "job_id", "mode", "node_index", "nnodes", "host", "hostname", "log_dir", "start_time",
        "status", "exit_code", "end_time", "restarts", "processes", "root_cause", "rounds",
        "restart_causes", "hangs", "schema", "preemption", "stragglers", "preflight", "recoveries",
    ]  # fmt: skip
    assert list(data["processes"][0])[:5] == ["role", "rank", "local_index", "host", "log_file"]
    assert data["root_cause"]["tail"] == ["boom"]
    assert RunSummary.from_json(data) == summary
    assert cause.replace(log_file="workerlog.1").log_file == "workerlog.1"
    assert cause.log_file is None


def test_a_one_node_launch_imports_neither_typing_nor_dataclasses(tmp_path) -> None:
    script = tmp_path / "noop.py"
    script.write_text("pass\n")
    argv = ["--nproc_per_node", "2", "--log_dir", str(tmp_path / "log"), "--tee", "none"]
    code = (
        "import sys\n"
        "from paddlike.launch.main import main\n"
        f"code = main({[*argv, str(script)]!r})\n"
        "print(code, sorted(m for m in ('typing', 'dataclasses') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout.strip().splitlines()[-1] == "0 []", done.stderr
