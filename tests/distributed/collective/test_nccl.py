"""The NCCL backend: pure parts everywhere, collectives only where CuPy sees a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from paddlike.distributed.collective import nccl, nccl_setup
from paddlike.distributed.collective.reduce_op import ReduceOp
from tests.support.collective_workers.launching import WORKERS, launch, logs, reports

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
    assert run.stderr.count("paddlike[gpu]") == 1, run.stderr  # said once


@pytest.mark.parametrize(
    "uid",
    [bytes(range(128)), tuple(((i * 37) % 256) - 128 for i in range(128))],
    ids=["bytes-cupy14", "tuple-older-cupy"],
)
def test_unique_id_survives_the_store_in_the_form_cupy_made_it(uid) -> None:
    back = nccl_setup.decode_unique_id(nccl_setup.encode_unique_id(uid))
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


DOUBLES = Path(__file__).resolve().parents[2] / "support" / "doubles"


def _on_a_gpu_node(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`code` where the stand-in cupy reports GPUs (and NCCL unless CUPY_DOUBLE_NCCL=0)."""
    contract = ("PADDLE", "MASTER", "RANK", "WORLD_SIZE", "LOCAL_RANK")
    base = {k: v for k, v in os.environ.items() if not k.startswith(contract)}
    root = Path(__file__).resolve().parents[3]
    env = {**base, "PYTHONPATH": f"{root}:{DOUBLES}", **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=env)  # fmt: skip


def test_without_a_loadable_libnccl_auto_runs_the_cpu_backend_and_nccl_says_why():
    code = ("from paddlike.distributed.collective import nccl\nprint(nccl.available())\n"
            "import paddlike.distributed as dist\ndist.init_parallel_env()\n"
            "print(dist.get_backend())\n")  # fmt: skip
    run = _on_a_gpu_node(code, CUPY_DOUBLE_NCCL="0")
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["False", "cpu"]
    forced = _on_a_gpu_node("import paddlike.distributed as d; d.init_parallel_env(backend='nccl')",
                            CUPY_DOUBLE_NCCL="0")  # fmt: skip
    assert forced.returncode != 0
    assert "CuPy could not load libnccl (cupy.cuda.nccl.available is False)" in forced.stderr
    assert forced.stderr.count("paddlike[gpu]") == 1, forced.stderr


def test_a_device_array_in_a_cpu_only_job_is_refused_and_the_group_stays_usable():
    code = ("import numpy as np, cupy\nimport paddlike.distributed as dist\n"
            "dist.init_parallel_env(backend='cpu')\n"
            "try:\n    dist.all_reduce(cupy.asarray(np.ones(2)))\n"
            "except TypeError as e:\n    print(e)\n"
            "x = np.ones(2); dist.all_reduce(x); print(x.sum())\n")  # fmt: skip
    run = _on_a_gpu_node(code)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "all_reduce: tensor is a device array (cupy), but group 0 runs only the CPU backend "
        "(backend='cpu'); use init_parallel_env(backend='auto') on a GPU node for cupy arrays",
        "2.0",
    ]


def test_a_host_array_where_only_nccl_was_asked_for_is_refused_and_the_group_stays_usable():
    code = ("import numpy as np, cupy\nimport paddlike.distributed as dist\n"
            "dist.init_parallel_env(backend='nccl')\n"
            "try:\n    dist.all_reduce(np.ones(2))\n"
            "except TypeError as e:\n    print(e)\n"
            "x = cupy.asarray(np.ones(2))\ndist.all_reduce(x)\n"
            "print(float(x.sum()))\n")  # fmt: skip
    run = _on_a_gpu_node(code)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "all_reduce: tensor is a host array (numpy), but group 0 runs only NCCL "
        "(backend='nccl'); pass cupy arrays, or init_parallel_env(backend='auto') for both kinds",
        "2.0",
    ]
