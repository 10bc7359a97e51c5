"""The NCCL backend: pure parts everywhere, collectives only where CuPy sees a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from paddlike.distributed.collective import nccl
from paddlike.distributed.collective.reduce_op import ReduceOp
from tests.collective_workers.launching import WORKERS, launch, logs, reports

BLOCK_CUPY = "import sys; sys.modules['cupy'] = None\n"  # any `import cupy` now fails


def _python(code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PADDLE", "MASTER", "RANK", "WORLD_SIZE"))}  # fmt: skip
    return subprocess.run([sys.executable, "-c", BLOCK_CUPY + code], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_import_and_init_work_without_cupy_and_pick_the_cpu_backend() -> None:
    run = _python(
        "import paddlike.distributed as dist\ndist.init_parallel_env(); print(dist.get_backend())\n"
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "cpu"


def test_asking_for_nccl_without_cupy_says_what_to_install() -> None:
    run = _python("import paddlike.distributed as dist\ndist.init_parallel_env(backend='nccl')\n")
    assert run.returncode != 0
    assert "backend='nccl' needs CuPy with NCCL" in run.stderr
    assert "paddlike[gpu]" in run.stderr


@pytest.mark.parametrize(
    "uid",
    [bytes(range(128)), tuple(((i * 37) % 256) - 128 for i in range(128))],
    ids=["bytes-cupy14", "tuple-older-cupy"],
)
def test_unique_id_survives_the_store_in_the_form_cupy_made_it(uid) -> None:
    back = nccl.decode_unique_id(nccl.encode_unique_id(uid))
    assert back == uid and type(back) is type(uid)


def test_bool_reduces_as_uint8_with_or_and_semantics_and_avg_divides() -> None:
    assert nccl.nccl_dtype_name(np.bool_, "all_reduce") == "NCCL_UINT8"
    assert nccl.nccl_op(ReduceOp.SUM, np.bool_) == ("NCCL_MAX", False)
    assert nccl.nccl_op(ReduceOp.PROD, np.bool_) == ("NCCL_MIN", False)
    assert nccl.nccl_op(ReduceOp.AVG, np.float32) == ("NCCL_SUM", True)
    with pytest.raises(TypeError, match="all_reduce: dtype int16 is not supported by NCCL"):
        nccl.nccl_dtype_name(np.int16, "all_reduce")


@pytest.mark.gpu
def test_nccl_collectives_on_two_gpus(tmp_path: Path) -> None:
    if not nccl.available(1):
        pytest.skip("needs CuPy with NCCL and two GPUs visible; none here")
    out = tmp_path / "results"
    out.mkdir()
    run = launch(tmp_path, WORKERS / "nccl_checks.py", str(out), nproc=2)
    assert run.returncode == 0, run.stdout + logs(tmp_path)
    for report in reports(out).values():
        assert report["backend"] == "nccl"
        assert report["failures"] == []
