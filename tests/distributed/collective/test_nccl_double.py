"""The CPU double of CuPy's NCCL binding (tests/support/doubles/cupy/cuda/nccl.py): CuPy's names,
argument order and constants, pinned below from CuPy's source, and the rules a GPU would
enforce by hanging or failing, on two real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
DOUBLES = REPO / "tests" / "support" / "doubles"
RULES = REPO / "tests" / "support" / "collective_workers" / "nccl_double_rules.py"

# Facts read from cupy/cupy (the CuPy 13.x/14.x binding, unchanged between them):
# cupy_backends/cuda/libs/nccl.pyx at commit 0fc06191609669206c0a0af000cbc54b82fe1ee8 and
# cupy_backends/cuda/libs/nccl.pxd at 8f4c987df8296ae9282aa833c7315d6732f33a11.
CUPY_SOURCE = "cupy/cupy nccl.pyx@0fc06191, nccl.pxd@8f4c987d"
CUPY_INIT = ["ndev", "commId", "rank"]  # commId: a tuple of 128 ints (Cython-typed `tuple`)
CUPY_METHODS = {
    "allReduce": ["sendbuf", "recvbuf", "count", "datatype", "op", "stream"],
    "reduce": ["sendbuf", "recvbuf", "count", "datatype", "op", "root", "stream"],
    "broadcast": ["sendbuff", "recvbuff", "count", "datatype", "root", "stream"],
    "bcast": ["buff", "count", "datatype", "root", "stream"],
    "reduceScatter": ["sendbuf", "recvbuf", "recvcount", "datatype", "op", "stream"],
    "allGather": ["sendbuf", "recvbuf", "count", "datatype", "stream"],
    "send": ["sendbuf", "count", "datatype", "peer", "stream"],
    "recv": ["recvbuf", "count", "datatype", "peer", "stream"],
    "check_async_error": [],  # ncclCommGetAsyncError
    "abort": [],
    "destroy": [],
    "device_id": [],
    "rank_id": [],
    "size": [],
}
CUPY_FUNCTIONS = {"get_unique_id": [], "get_version": [], "groupStart": [], "groupEnd": []}
CUPY_CONSTANTS = {
    "NCCL_SUM": 0, "NCCL_PROD": 1, "NCCL_MAX": 2, "NCCL_MIN": 3, "NCCL_AVG": 4,
    "NCCL_INT8": 0, "NCCL_CHAR": 0, "NCCL_UINT8": 1, "NCCL_INT32": 2, "NCCL_INT": 2,
    "NCCL_UINT32": 3, "NCCL_INT64": 4, "NCCL_UINT64": 5, "NCCL_FLOAT16": 6, "NCCL_HALF": 6,
    "NCCL_FLOAT32": 7, "NCCL_FLOAT": 7, "NCCL_FLOAT64": 8, "NCCL_DOUBLE": 8,
    "NCCL_BFLOAT16": 9,
}  # fmt: skip


def _run(arg: str, doubles: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
    path = f"{REPO}:{DOUBLES}" if doubles else str(REPO)
    return subprocess.run([sys.executable, str(RULES), arg], capture_output=True, text=True,
                          timeout=90, env={**os.environ, "PYTHONPATH": path, **env})  # fmt: skip


def _signatures(doubles: bool = True) -> dict:
    run = _run("signatures", doubles)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def _check_against_cupy(got: dict) -> None:
    """What introspects is compared; a parameter list that does not (None: a Cython method,
    or CuPy 14's `(*args, **kwargs)`) is unknown, but the method must still be there."""
    assert got["init"] in (CUPY_INIT, None), CUPY_SOURCE
    for name, params in CUPY_METHODS.items():
        assert name in got["methods"], (f"NcclCommunicator.{name} is missing", CUPY_SOURCE)
        assert got["methods"][name] in (params, None), (name, CUPY_SOURCE)
    for name, params in CUPY_FUNCTIONS.items():
        assert name in got["functions"], (f"nccl.{name} is missing", CUPY_SOURCE)
        assert got["functions"][name] in (params, None), (name, CUPY_SOURCE)
    for name, value in CUPY_CONSTANTS.items():
        assert got["constants"][name] == value, (name, CUPY_SOURCE)


def test_the_double_has_cupys_names_argument_order_and_constants():
    got = _signatures()
    assert got["available"] is True
    _check_against_cupy(got)
    # every parameter list is known (a double's method without one could drift unseen)
    assert None not in got["methods"].values() and got["init"] is not None


@pytest.mark.gpu  # also run by `make test-gpu`, where the real CuPy is
def test_a_real_cupy_where_importable_has_the_pinned_signatures():
    probe = subprocess.run([sys.executable, "-c", "import cupy.cuda.nccl"], capture_output=True,
                           env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)  # fmt: skip
    if probe.returncode != 0:
        pytest.skip("no real CuPy with NCCL here (it comes with paddlike[gpu] on a GPU node)")
    got = _signatures(doubles=False)
    if got["available"]:
        _check_against_cupy(got)


def test_without_a_loadable_libnccl_the_module_imports_but_says_so_like_cupy():
    got = _signatures_without_nccl()
    assert got == {"available": False, "names": []}


def _signatures_without_nccl() -> dict:
    code = ("import json; from cupy.cuda import nccl; print(json.dumps({'available': "
            "nccl.available, 'names': [n for n in dir(nccl) if n.startswith(('Nccl', 'NCCL', "
            "'get_unique'))]}))")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(DOUBLES), "CUPY_DOUBLE_NCCL": "0"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env=env)  # fmt: skip
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def rule(name: str) -> dict[str, dict]:
    run = _run(name)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_different_collectives_name_both_ranks_calls_and_their_numbers():
    got = rule("mismatch")
    want = ("rank 0 called allReduce(count 4, float32, sum) as call #2 but rank 1 called "
            "broadcast(count 4, float32, root 0) as call #2: the ranks called different "
            "collectives")  # fmt: skip
    assert want in got["0"]["error"] and want in got["1"]["error"]


def test_a_send_that_meets_a_collective_is_an_error_on_both_ranks():
    got = rule("unmatched_send")
    for r in ("0", "1"):
        assert "rank 0 called send(to rank 1, count 4, float32) as call #1 but rank 1 called " \
               "allReduce(count 4, float32, sum) as call #1" in got[r]["error"]


def test_a_receive_of_another_size_than_the_send_is_an_error():
    got = rule("count_mismatch")
    assert "rank 0 sends [(4, 7)] (count, dtype) to rank 1, which receives [(2, 7)]" in \
        got["1"]["error"]


def test_grouped_sends_and_receives_exchange_the_bytes():
    got = rule("p2p")
    assert got["0"] == {"received": [2.0, 2.0]} and got["1"] == {"received": [1.0, 1.0]}


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("group_end_alone", "NcclError: NCCL_ERROR_INVALID_USAGE: groupEnd() without groupStart()"),
        ("bfloat16", "NCCL_ERROR_INVALID_ARGUMENT: allReduce: datatype 9 is not one"),
        ("after_abort", "NCCL_ERROR_INVALID_ARGUMENT: allReduce: the communicator was aborted"),
        ("bytes_id", "TypeError: Argument 'commId' has incorrect type (expected tuple, got bytes)"),
    ],
)
def test_what_cupy_or_nccl_refuses_the_double_refuses(name, words):
    got = rule(name)
    assert words in got["0"]["error"], got
