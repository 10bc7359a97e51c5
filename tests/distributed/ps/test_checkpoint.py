"""save -> kill the servers -> restart -> load: nothing lost, mismatches refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from paddlike.distributed import ps
from paddlike.distributed.ps import checkpoint
from tests.support.ps_workers.cluster import ps_job, serving, trainer_env


def save_then_crash(tmp_path: Path, ckpt: Path) -> dict[str, np.ndarray]:
    out = tmp_path / "a.npz"
    with ps_job(
        tmp_path / "job1",
        "ckpt_train.py",
        [str(ckpt), str(out), "--phase", "save"],
        servers=2,
        trainers=1,
    ) as job:
        assert job.wait_trainers(60) == [0], job.log("t0")
        assert all(p.poll() is None for p in job.servers)  # killed at exit, like a crash
    return {"saved": dict(np.load(f"{out}.saved.npz")), "after": dict(np.load(out))}


def test_load_after_server_restart_restores_every_row_and_optimizer_state(tmp_path):
    ckpt = tmp_path / "ckpt"
    for d in ("job1", "job2"):
        (tmp_path / d).mkdir()
    a = save_then_crash(tmp_path, ckpt)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a.npz",
        "a.npz.saved.npz",
        "ckpt",
        "job1",
        "job2",
    ]
    out = tmp_path / "b.npz"
    with ps_job(
        tmp_path / "job2",
        "ckpt_train.py",
        [str(ckpt), str(out), "--phase", "load"],
        servers=2,
        trainers=1,
    ) as job:
        job.check(60)
    for name in ("w", "emb"):
        np.testing.assert_array_equal(np.load(f"{out}.saved.npz")[name], a["saved"][name])
        np.testing.assert_array_equal(np.load(out)[name], a["after"][name])


def test_load_into_another_server_count_or_shape_is_an_error_that_says_so(tmp_path):
    ckpt = tmp_path / "ckpt"
    for d in ("job1", "job2", "job3"):
        (tmp_path / d).mkdir()
    save_then_crash(tmp_path, ckpt)
    env = {"PADDLIKE_TIMEOUT": "10"}
    args = [str(ckpt), str(tmp_path / "x.npz"), "--phase", "load"]
    with ps_job(
        tmp_path / "job2", "ckpt_train.py", args, servers=3, trainers=1, extra_env=env
    ) as job:
        assert job.wait_trainers(60) == [1]
        assert "was saved by 2 servers, this job has 3" in job.log("t0")
    with ps_job(
        tmp_path / "job3",
        "ckpt_train.py",
        [*args, "--shape", "999"],
        servers=2,
        trainers=1,
        extra_env=env,
    ) as job:
        assert job.wait_trainers(60) == [1]
        assert (
            "table 'w' has shape=(1000,) in the checkpoint, this job declares shape=(999,)"
            in job.log("t0")
        )


def test_a_save_that_fails_on_one_server_leaves_the_previous_checkpoint_whole(
    tmp_path, monkeypatch
):
    ckpt = tmp_path / "ckpt"
    with serving(tmp_path, servers=2) as job:
        ps.init(trainer_env(job))
        ps.init_worker(mode="async", timeout=10)
        w = ps.dense_table("w", shape=(10,), optimizer=ps.SGD(lr=1.0))
        w.assign(np.arange(10, dtype=np.float32))
        ps.save(ckpt)
        w.push(np.ones(10, np.float32))
        broken = tmp_path / "ckpt.tmp-broken"

        def temp_dir_for(final: Path) -> Path:
            (broken / "server-1").parent.mkdir()
            (broken / "server-1").write_text("not a directory")  # server 1 cannot write here
            return broken

        monkeypatch.setattr(checkpoint, "temp_dir_for", temp_dir_for)
        with pytest.raises(ps.PsError, match=r"parameter server 1 at .*: NotADirectoryError"):
            ps.save(ckpt)
        assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["ckpt"]
        ps.load(ckpt)
        np.testing.assert_array_equal(w.pull(), np.arange(10))
        ps.stop_worker()
