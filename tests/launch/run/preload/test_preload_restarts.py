"""--preload across restarts and when it cannot be used: rank 1 exits during step 5 under
--max_restarts 1 (every worker of the new round forked from the zygote), a module that
starts a thread at import (one warning, cold), a module that does not exist (exit 2,
nothing started), the zygote killed (one warning, cold from then on)."""

from __future__ import annotations

from pathlib import Path

import pytest

from paddlike.summary import read_summary
from tests.launch.run.preload.conftest import launch, probes

pytestmark = pytest.mark.timeout(180)

RESTART = ["--nproc_per_node", "2", "--max_restarts", "1"]


def _steps(log: Path) -> list[str]:
    return [ln for ln in log.read_text().splitlines() if ln.startswith("STEP ")]


@pytest.mark.parametrize("preload", [False, True], ids=["cold", "preload"])
def test_rank_1_exiting_in_step_5_restarts_every_rank_from_the_zygote(
    scripts: Path, preload: bool
) -> None:
    given = ["--preload", "heavy"] if preload else []
    done = launch(scripts, *RESTART, *given, "probe.py", str(scripts / "out"), "steps")
    assert done.returncode == 0, done.stderr
    assert "restart 1 of 1 after: trainer rank 1 exited with code 3" in done.stderr
    assert "--preload" not in done.stderr  # no warning
    said = [ln for ln in done.stderr.splitlines() if "workers start as its forks" in ln]
    assert len(said) == (1 if preload else 0), done.stderr  # once, not at the restart
    if preload:
        assert said[0].startswith("paddlike.launch: preloaded heavy in ")
    seen = probes(scripts)
    assert sorted(seen) == ["0.0", "0.1", "1.0", "1.1"]
    assert all(s["preloaded"] is preload for s in seen.values())
    assert _steps(scripts / "log" / "workerlog.1")[-1] == "STEP 7 RESTART 1"
    summary = read_summary(scripts / "log")
    assert summary is not None and summary.status == "succeeded" and summary.restarts == 1


def test_a_module_that_starts_a_thread_at_import_falls_back_to_cold_starts(scripts: Path) -> None:
    done = launch(scripts, "--preload", "heavy,threaded", "probe.py", str(scripts / "out"))
    assert done.returncode == 0, done.stderr
    warnings = [ln for ln in done.stderr.splitlines() if "--preload" in ln]
    assert len(warnings) == 1, done.stderr
    assert "threaded started a thread at import (warmup)" in warnings[0]
    assert warnings[0].endswith("workers start cold")
    assert probes(scripts)["0.0"]["preloaded"] is False


def test_a_preload_module_that_does_not_exist_starts_nothing(scripts: Path) -> None:
    done = launch(scripts, "--preload", "heavy,nosuchmodule", "probe.py", str(scripts / "out"))
    assert done.returncode == 2
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, done.stderr
    assert "--preload: no module named 'nosuchmodule'" in lines[0]
    assert str(scripts) in lines[0]  # where it looked: the script's directory first
    assert not (scripts / "log").exists()
    assert probes(scripts) == {}


def test_dry_run_refuses_a_missing_preload_module_as_the_start_would(scripts: Path) -> None:
    dry = launch(scripts, "--dry_run", "--preload", "heavy,nosuchmodule", "probe.py", "out")
    assert dry.returncode == 2, dry.stdout
    said = "paddlike.launch: error: --preload: no module named 'nosuchmodule'"
    assert dry.stderr.startswith(said), dry.stderr
    assert dry.stdout == "" and not (scripts / "log").exists()
    ok = launch(scripts, "--dry_run", "--preload", "heavy", "probe.py", "out")
    assert ok.returncode == 0, ok.stderr
    assert "(--preload heavy: a zygote imports them once when the job starts" in ok.stdout


def test_a_module_found_on_pythonpath_is_preloaded(scripts: Path) -> None:
    lib = scripts / "lib"
    lib.mkdir()
    (scripts / "heavy.py").rename(lib / "heavy.py")
    done = launch(
        scripts,
        "--preload",
        "heavy",
        "probe.py",
        str(scripts / "out"),
        env={"PYTHONPATH": str(lib)},
    )
    assert done.returncode == 0, done.stderr
    assert probes(scripts)["0.0"]["preloaded"] is True


def test_a_zygote_that_dies_leaves_later_starts_cold_with_one_warning(scripts: Path) -> None:
    done = launch(
        scripts,
        *RESTART,
        "--preload",
        "heavy",
        "probe.py",
        str(scripts / "out"),
        "steps-kill-zygote",
    )
    assert done.returncode == 0, done.stderr
    warnings = [ln for ln in done.stderr.splitlines() if "--preload" in ln]
    assert len(warnings) == 1, done.stderr
    assert "the preload zygote (pid " in warnings[0] and "ended (signal 9)" in warnings[0]
    seen = probes(scripts)
    assert seen["0.0"]["preloaded"] and seen["1.0"]["preloaded"]
    assert not seen["0.1"]["preloaded"] and not seen["1.1"]["preloaded"]


def test_processes_a_failed_worker_left_are_reaped_before_the_next_round(scripts: Path) -> None:
    """The launcher is a child subreaper: a worker's children that outlive it come to it."""
    done = launch(
        scripts, *RESTART, "--preload", "heavy", "probe.py", str(scripts / "out"), "steps-orphan"
    )
    assert done.returncode == 0, done.stderr
    seen = probes(scripts)
    assert seen["0.1"]["preloaded"] and seen["1.1"]["preloaded"]
    assert seen["0.1"]["launcher_zombies"] == [] and seen["1.1"]["launcher_zombies"] == []


def test_a_module_that_leaves_a_cuda_context_falls_back_to_cold_starts(scripts: Path) -> None:
    """No GPU here: a stand-in `torch` in the script's directory (found first, as the
    script's own import would find it) whose CUDA says it is initialized."""
    fake = scripts / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        "class cuda:\n    @staticmethod\n    def is_initialized():\n        return True\n"
    )
    done = launch(scripts, "--preload", "heavy,torch", "probe.py", str(scripts / "out"))
    assert done.returncode == 0, done.stderr
    warnings = [ln for ln in done.stderr.splitlines() if "--preload" in ln]
    assert len(warnings) == 1, done.stderr
    assert "after importing torch, torch.cuda.is_initialized() is True" in warnings[0]
    assert probes(scripts)["0.0"]["preloaded"] is False
