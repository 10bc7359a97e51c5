"""The global view through the real launcher: one launch per world size runs the whole
matrix in the workers (tests/support/global_view_workers/matrix.py), plus the example."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.collective_workers.launching import REPO, launch, logs, reports

GV_WORKERS = Path(__file__).resolve().parents[2] / "support" / "global_view_workers"


@pytest.mark.parametrize("nproc", [2, 3, 4])
def test_every_conversion_operator_and_error_matches_numpy_on_every_rank(
    tmp_path: Path, nproc: int
) -> None:
    out = tmp_path / "results"
    out.mkdir()
    env = {"PYTHONWARNINGS": "error::RuntimeWarning"}
    run = launch(tmp_path, GV_WORKERS / "matrix.py", str(out), nproc=nproc, env=env)
    assert run.returncode == 0, run.stdout + logs(tmp_path)
    got = reports(out)
    assert sorted(got) == list(range(nproc)), logs(tmp_path)
    for rank, report in got.items():
        assert report["failures"] == [], f"rank {rank}:\n" + "\n".join(report["failures"])
        assert report["checks"] > 900, report["checks"]


@pytest.mark.parametrize("nproc", [2, 4])
def test_global_linear_example_reaches_w_2_3_on_every_rank(tmp_path: Path, nproc: int) -> None:
    run = launch(tmp_path, REPO / "examples" / "global_linear.py", nproc=nproc)
    assert run.returncode == 0, run.stdout + logs(tmp_path)
    for rank in range(nproc):
        text = (tmp_path / "log" / f"workerlog.{rank}").read_text()
        m = re.search(rf"rank {rank}/{nproc}: w = \[([-\d.e]+), ([-\d.e]+)\]", text)
        assert m, text
        w = (float(m.group(1)), float(m.group(2)))
        assert abs(w[0] - 2) < 1e-4 and abs(w[1] - 3) < 1e-4, w
    first = (tmp_path / "log" / "workerlog.0").read_text()
    assert "(err S(0), x.T @ err P)" in first


@pytest.mark.gpu
def test_cuda_placement_boxes_cupy_arrays_over_nccl(tmp_path: Path) -> None:
    from paddlike.distributed.collective import nccl

    if not nccl.available(1):
        pytest.skip("needs CuPy with NCCL and two GPUs visible; none here")
    out = tmp_path / "results"
    out.mkdir()
    run = launch(tmp_path, GV_WORKERS / "cuda_checks.py", str(out), nproc=2)
    assert run.returncode == 0, run.stdout + logs(tmp_path)
    for report in reports(out).values():
        assert report["failures"] == [], report["failures"]
