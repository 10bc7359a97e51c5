"""A real torch script (gloo, DataLoader(num_workers=2), its own SIGTERM handler) saves at
a preemption notice (issue 34): its DataLoader's workers are not signalled before its
main process exits, so the save that reads on from them finishes on every rank."""

from __future__ import annotations

import pytest

from tests.launch.run.test_preempt import _launch_and_notice, _saved
from tests.support.collective_workers.launching import REPO, logs

pytestmark = pytest.mark.timeout(180)
SCRIPT = REPO / "tests" / "support" / "signal_workers" / "torch_save_on_notice.py"


def test_a_torch_script_with_dataloader_workers_saves_the_same_step_on_every_rank(tmp_path):
    pytest.importorskip("torch.utils.data", reason="torch is not installed (make torch-env)")
    code, out = _launch_and_notice(tmp_path, script=SCRIPT)
    saved = _saved(tmp_path)
    assert sorted(saved) == [0, 1], out + logs(tmp_path)
    assert len(set(saved.values())) == 1, saved
    assert all((tmp_path / "out" / f"ckpt.{r}.pt").stat().st_size > 0 for r in (0, 1))
    text = logs(tmp_path)
    assert "killed by signal" not in text, text
    assert "SIGTERM seen: True" in text  # its own handler ran, and the process went on
    assert code == 143 and "every rank stopped after step" in out.strip().splitlines()[-1]
