"""--straggler_check under the real launcher on one node (issue 37): a torch gloo script,
unmodified, whose rank sleeps an extra 50 ms before each all_reduce is named on the
console within two checks, once; a balanced job and a job without collectives name
nobody; a paddlike-runtime script's slow rank is named from paddlike's own record."""

from __future__ import annotations

import html
import io
import json
import os
from pathlib import Path

import pytest

from paddlike.logs.__main__ import main as logs_main
from tests.support.collective_workers.launching import launch, logs

WORKERS = Path(__file__).resolve().parents[2] / "support"
STEPS = WORKERS / "straggler_workers" / "steps.py"
PADDLIKE_STRAGGLER = WORKERS / "hang_workers" / "straggler.py"
CHECK = "1"  # seconds between checks: short, so that a short job sees several


def stragglers(tmp: Path) -> dict | None:
    return json.loads((tmp / "log" / "summary.json").read_text())["stragglers"]


def named_lines(console: str) -> list[str]:
    return [line for line in console.splitlines() if line.startswith("paddlike.launch: straggl")]


def needs_torch() -> None:
    pytest.importorskip("torch.distributed", reason="torch is not installed")


@pytest.mark.timeout(180)
def test_a_torch_rank_that_sleeps_before_each_all_reduce_is_named_within_two_checks(
    tmp_path: Path,
) -> None:
    needs_torch()
    args = ["--steps", "100", "--work", "0.02", "--late", "2", "--extra", "0.05"]
    run = launch(tmp_path, STEPS, *args, nproc=3, env={"PADDLIKE_STRAGGLER_CHECK": CHECK},
                 timeout=150)  # fmt: skip
    assert run.returncode == 0, run.stdout + logs(tmp_path)
    host = os.uname().nodename
    lines = named_lines(run.stdout)
    assert len(lines) == 1, run.stdout  # said once: nothing changed after
    assert lines[0].startswith(
        f"paddlike.launch: straggler: rank 2 (node {host}, workerlog.2) arrived last at "
    ), run.stdout
    assert "median (a collective every" in lines[0]
    table = stragglers(tmp_path)
    assert table is not None and table["since"] <= 2, table  # the 1st or 2nd check named it
    assert [r["rank"] for r in table["ranks"] if r["straggler"]] == [2]
    assert table["ranks"][0]["rank"] == 2 and table["ranks"][0]["median"] > 0.04
    # the page's heat map: every rank at each collective, rank 2's row the late one
    heat = table["heat"]
    assert [r["rank"] for r in heat["ranks"]] == [0, 1, 2] and heat["ranks_total"] == 3
    assert [r["rank"] for r in heat["ranks"] if r["straggler"]] == [2]
    assert len(heat["collectives"]) == table["window"]
    cells = sorted(v for v in heat["ranks"][2]["lateness_ms"] if v is not None)
    assert cells[len(cells) // 2] > 40
    # python -m paddlike.logs DIR --stragglers: the same line, then the table, rank 2 first
    out = io.StringIO()
    assert logs_main([str(tmp_path / "log"), "--stragglers"], out=out) == 0
    text = out.getvalue().splitlines()
    # the last check's line (its figures newer than the console's first)
    assert text[0].startswith(f"straggler: rank 2 (node {host}, workerlog.2) arrived last at ")
    assert text[1].startswith("lateness at the last ") and text[2].split()[:4] == [
        "who",
        "node",
        "last",
        "median",
    ]
    assert text[3].startswith(f"* rank 2      {host}") and "workerlog.2" in text[3]
    assert [t[:1] for t in text[4:]] == [" ", " "]
    # the default view says it under node 0, and the page's report too
    out = io.StringIO()
    assert logs_main([str(tmp_path / "log")], out=out) == 0
    assert f"\n  {text[0]}\n" in out.getvalue()
    page = tmp_path / "job.html"
    assert logs_main([str(tmp_path / "log"), "--html", str(page)], out=io.StringIO()) == 0
    assert html.escape(text[0], quote=False) in page.read_text()


@pytest.mark.timeout(300)
def test_a_balanced_torch_job_names_nobody(tmp_path: Path) -> None:
    needs_torch()
    for trial in range(3):
        tmp = tmp_path / str(trial)
        tmp.mkdir()
        run = launch(tmp, STEPS, "--steps", "80", "--work", "0.02", nproc=3,
                     env={"PADDLIKE_STRAGGLER_CHECK": CHECK}, timeout=150)  # fmt: skip
        assert run.returncode == 0, run.stdout + logs(tmp)
        assert named_lines(run.stdout) == [], run.stdout
        table = stragglers(tmp)
        assert table is not None and table["window"] > 0, table  # the checks compared some
        assert table["named"] == [] and not any(r["straggler"] for r in table["ranks"])
        assert not any(r["straggler"] for r in table["heat"]["ranks"])


@pytest.mark.timeout(180)
def test_a_torch_job_without_collectives_gets_no_report(tmp_path: Path) -> None:
    needs_torch()
    args = ["--steps", "80", "--work", "0.03", "--late", "1", "--no_collective"]
    run = launch(tmp_path, STEPS, *args, nproc=2, env={"PADDLIKE_STRAGGLER_CHECK": CHECK},
                 timeout=150)  # fmt: skip
    assert run.returncode == 0, run.stdout + logs(tmp_path)
    assert named_lines(run.stdout) == [], run.stdout
    assert stragglers(tmp_path) is None
    out = io.StringIO()
    assert logs_main([str(tmp_path / "log"), "--stragglers"], out=out) == 0
    assert out.getvalue().startswith("no straggler check compared collectives in this job")


@pytest.mark.timeout(180)
def test_a_paddlike_runtime_rank_that_computes_longer_is_named(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    run = launch(tmp_path, PADDLIKE_STRAGGLER, str(out), "150", nproc=3,
                 env={"PADDLIKE_STRAGGLER_CHECK": CHECK}, timeout=150)  # fmt: skip
    assert run.returncode == 0, run.stdout + logs(tmp_path)
    lines = named_lines(run.stdout)
    assert len(lines) == 1 and "straggler: rank 2 (" in lines[0], run.stdout
    # heartbeat() measured the step: the line compares the lateness with it
    assert "median (the step takes " in lines[0], lines
    table = stragglers(tmp_path)
    assert table is not None and table["step_known"] and table["since"] <= 2, table


@pytest.mark.timeout(120)
def test_straggler_check_0_checks_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    run = launch(tmp_path, PADDLIKE_STRAGGLER, str(out), "60", nproc=3,
                 env={"PADDLIKE_STRAGGLER_CHECK": "0"}, timeout=100)  # fmt: skip
    assert run.returncode == 0, run.stdout + logs(tmp_path)
    assert named_lines(run.stdout) == [] and stragglers(tmp_path) is None
