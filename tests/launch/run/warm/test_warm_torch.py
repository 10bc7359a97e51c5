"""In-process restarts with real torch (CPU build, `make torch-env`), gloo: rank 1 exits
during step 5 under --max_restarts 1; the kept rank 0 destroys its process group and makes
a new one for the new round (torch allows it for gloo), whether the script formed it
inside `fn` or before `restartable`, cold or with --preload."""

from __future__ import annotations

from pathlib import Path

import pytest

from paddlike.summary import read_summary
from tests.launch.run.preload.conftest import launch
from tests.launch.run.warm.conftest import seen

pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(300)

RESTART = ["--nproc_per_node", "2", "--max_restarts", "1"]


@pytest.mark.parametrize(
    ("how", "preload"),
    [("inside", False), ("before", False), ("inside", True)],
    ids=["formed-in-fn", "formed-before", "preload"],
)
def test_a_gloo_job_keeps_rank_0_and_starts_only_rank_1_anew(
    train: Path, how: str, preload: bool
) -> None:
    tmp = train.parent
    given = ["--preload", "heavy,torch"] if preload else []
    done = launch(
        tmp, *RESTART, *given, "train.py", str(tmp / "out"), how, "torch", timeout=240
    )
    assert done.returncode == 0, done.stderr
    assert "--preload:" not in done.stderr
    s = seen(tmp / "out")
    assert sorted(s) == ["0.0", "0.1", "1.0", "1.1"]
    assert s["0.1"]["pid"] == s["0.0"]["pid"]
    assert s["1.1"]["pid"] != s["1.0"]["pid"]
    assert s["1.1"]["preloaded"] is preload
    assert s["0.1"]["env"]["MASTER_PORT"] == s["1.1"]["env"]["MASTER_PORT"]
    assert s["0.1"]["env"]["PADDLIKE_RESTART_COUNT"] == "1"
    pid = s["0.0"]["pid"]
    assert f"restart 1/1: 1 process kept (rank 0, pid {pid}), 1 started anew" in done.stderr
    log0 = (tmp / "log" / "workerlog.0").read_text()
    assert "STEP 7 RESTART 1" in log0 and log0.rstrip().endswith("fn returned")
    summary = read_summary(tmp / "log")
    assert summary is not None and summary.status == "succeeded"
    assert [k["pid"] for k in summary.recoveries[0]["kept"]] == [pid]
