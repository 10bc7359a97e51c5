"""examples/ps_ctr.py under the launcher reaches its stated loss in every mode."""

from __future__ import annotations

import pytest

from tests.support.ps_workers.cluster import REPO, launch_ps, logs_of


@pytest.mark.parametrize("mode", ["sync", "async", "geo"])
def test_ps_ctr_example_reaches_its_target_loss_on_2_servers_and_2_workers(tmp_path, mode):
    done = launch_ps(tmp_path, REPO / "examples" / "ps_ctr.py", ["--mode", mode, "--steps", "150"])
    log = (tmp_path / "log" / "workerlog.0").read_text()
    assert done.returncode == 0, done.stderr + logs_of(tmp_path)
    assert f"mode {mode}: held-out loss" in log and "reached target < 0.46" in log, log
