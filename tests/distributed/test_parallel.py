"""DataParallel and examples/ddp_train.py through the real launcher."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.collective_workers.launching import REPO, WORKERS, launch, logs, reports


def test_ddp_example_converges_to_the_same_weights_on_both_ranks(tmp_path: Path) -> None:
    run = launch(tmp_path, REPO / "examples" / "ddp_train.py", nproc=2)
    assert run.returncode == 0, run.stdout + logs(tmp_path)
    for rank in (0, 1):
        text = (tmp_path / "log" / f"workerlog.{rank}").read_text()
        m = re.search(rf"rank {rank}/2: w = \[([-\d.e]+), ([-\d.e]+)\]", text)
        assert m, text
        w = (float(m.group(1)), float(m.group(2)))
        assert abs(w[0] - 2) < 1e-4 and abs(w[1] - 3) < 1e-4, w


def test_data_parallel_broadcasts_parameters_and_averages_gradients_in_buckets(
    tmp_path: Path,
) -> None:
    out = tmp_path / "results"
    out.mkdir()
    run = launch(tmp_path, WORKERS / "ddp_checks.py", str(out), nproc=3)
    assert run.returncode == 0, run.stdout + logs(tmp_path)
    got = reports(out)
    assert sorted(got) == [0, 1, 2]
    for report in got.values():
        assert report == {
            "params_from_rank0": True,
            "call": 42.0,
            "attr": "model attribute",
            "grads_averaged": True,
            "functional": True,
        }
