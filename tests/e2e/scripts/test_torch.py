"""A torch.distributed script runs unchanged under paddlike.launch (real gloo all_reduce)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.collective_workers.launching import WORKERS, launch, logs, reports


def test_torch_gloo_script_finds_its_environment_and_all_reduces(tmp_path: Path) -> None:
    pytest.importorskip("torch.distributed", reason="torch is not installed")
    out = tmp_path / "results"
    out.mkdir()
    run = launch(tmp_path, WORKERS / "torch_gloo.py", str(out), nproc=2)
    assert run.returncode == 0, run.stdout + logs(tmp_path)
    got = reports(out)
    assert sorted(got) == [0, 1]
    for rank, report in got.items():
        assert report["sum"] == [3.0, 3.0, 3.0]
        assert report["world"] == 2
        env = report["env"]
        assert env["RANK"] == str(rank) and env["WORLD_SIZE"] == "2"
        assert env["LOCAL_RANK"] == str(rank)
        assert env["MASTER_ADDR"] and env["MASTER_PORT"].isdigit()
