"""PS training end to end through the launcher: sync equals one process; async and geo converge."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from paddlike.distributed import ps
from tests.support.ps_workers.cluster import launch_ps, logs_of
from tests.support.ps_workers.ctr_model import DIM, NUM_KEYS, forward_backward, make_data

W_LR, EMB_LR = 0.5, 0.1


def reference(steps: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """Single-process SGD (dense) + lazy Adagrad (sparse) on the same batches."""
    w = np.full(DIM + 1, 0.1, dtype=np.float32)
    all_keys = np.arange(NUM_KEYS, dtype=np.int64)
    emb = ps.Uniform(-0.1, 0.1, seed=7).rows(all_keys, DIM)
    acc = np.zeros_like(emb)
    keys, labels = make_data(seed=1, n=steps * batch)
    for step in range(steps):
        k, y = keys[step * batch : (step + 1) * batch], labels[step * batch : (step + 1) * batch]
        _, gw, grows = forward_backward(emb[k], w, y)
        g = np.zeros_like(emb)
        np.add.at(g, k.reshape(-1), grows.reshape(-1, DIM))
        touched = np.unique(k)
        w = w - W_LR * gw
        acc[touched] += g[touched] ** 2
        emb[touched] -= EMB_LR * g[touched] / (np.sqrt(acc[touched]) + 1e-6)
    return w, emb


def run(tmp_path: Path, mode: str, steps: int, batch: int = 64) -> tuple[dict, list]:
    out = tmp_path / "result.npz"
    args = [str(out), "--mode", mode, "--steps", str(steps), "--batch", str(batch)]
    done = launch_ps(tmp_path, "ctr_train.py", args, servers=2, workers=2)
    assert done.returncode == 0, done.stderr + logs_of(tmp_path)
    losses = [json.loads(Path(f"{out}.trainer{i}.json").read_text())["losses"] for i in range(2)]
    return dict(np.load(out)), losses


def test_sync_training_on_two_servers_equals_one_process_on_the_union_of_batches(tmp_path):
    got, _ = run(tmp_path, "sync", steps=15)
    w, emb = reference(steps=15, batch=64)
    np.testing.assert_allclose(got["w"], w, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["emb"], emb, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["async", "geo"])
def test_async_and_geo_training_reduce_the_loss(tmp_path, mode):
    _, losses = run(tmp_path, mode, steps=60)
    for trainer_losses in losses:
        first, last = np.mean(trainer_losses[:5]), np.mean(trainer_losses[-5:])
        assert last < 0.8 * first, f"{mode}: loss went from {first:.3f} to {last:.3f}"


def test_a_trainer_that_exits_3_ends_the_job_with_code_3(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text(
        "import sys\nfrom paddlike.distributed import ps\nps.init()\n"
        "if ps.is_server():\n    ps.run_server()\n"
        "else:\n    ps.init_worker()\n    sys.exit(3 if ps.trainer_id() == 1 else 0)\n"
    )
    done = launch_ps(tmp_path, script, servers=1, workers=2)
    assert done.returncode == 3, done.stderr + logs_of(tmp_path)
