"""The NCCL path on a real GPU (`make test-gpu`), and the two-ranks-on-one-GPU check.

The `gpu`-marked tests need CuPy with NCCL and a visible NVIDIA GPU and skip without
them. World size 1 on GPU 0, in this process: unique-id exchange, communicator creation,
every operation and ReduceOp on every NCCL dtype, groups, asynchronous tasks,
DataParallel on cupy arrays; in subprocesses: the deadline watcher and abort (so that an
aborted communicator cannot spoil this process's CUDA context), `backend="auto"`, a
launch on this node (one worker per GPU, backend nccl), two ranks forced onto one GPU;
and NVML agreeing with CUDA.

The duplicate-GPU check itself runs here too, without a GPU: real store, real threads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from paddlike.distributed.collective import nccl, nccl_setup
from paddlike.distributed.collective.errors import CollectiveError
from paddlike.distributed.store import StoreClient, StoreServer
from tests.support.fixed_ports import fixed_ports

REPO = Path(__file__).resolve().parents[3]
NCCL_DTYPES = ["float16", "float32", "float64", "int8", "uint8", "int32", "int64", "bool"]
OPS = ["SUM", "MAX", "MIN", "PROD", "AVG"]
# Variables a launcher may have set around this test run: the world of one sets its own.
CONTRACT_PREFIXES = ("PADDLE", "FLAGS_selected", "MASTER_", "RANK", "WORLD_SIZE", "LOCAL_",
                     "GROUP_", "NODE_RANK", "CUDA_VISIBLE", "PADDLIKE_")  # fmt: skip


# --- without a GPU: two ranks on one GPU are named before NCCL is asked -----------------------


def _set_up(identities: list[bytes]) -> dict[int, BaseException | None]:
    """Every rank of a group claims its GPU, passes the pre-constructor barrier, and checks."""
    results: dict[int, BaseException | None] = {}
    ranks = [4, 5, 6][: len(identities)]
    with StoreServer().start() as srv:

        def rank(k: int) -> None:
            with StoreClient(*srv.address, timeout=10) as store:
                try:
                    prefix, deadline = "paddlike/r0/i0/g2", time.monotonic() + 20
                    nccl_setup.claim_gpu(store, prefix, k, ranks, identities[k])
                    nccl_setup.await_peers(store, prefix, k, ranks, deadline)
                    nccl_setup.refuse_shared_gpu(store, prefix, k, ranks, deadline)
                    results[k] = None
                except Exception as exc:
                    results[k] = exc

        threads = [threading.Thread(target=rank, args=(k,)) for k in range(len(identities))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
    return results


def test_ranks_on_distinct_gpus_pass():
    ids = [b"uuid:aa\tGPU 0 on h", b"uuid:bb\tGPU 1 on h", b"uuid:cc\tGPU 0 on h2"]
    assert _set_up(ids) == {0: None, 1: None, 2: None}


def test_two_ranks_on_one_gpu_make_every_rank_raise_naming_both_ranks_and_the_device():
    same = b"pci:boot-1/0000:01:00.0\tGPU 0 (PCI 0000:01:00.0) on gpunode"
    results = _set_up([b"pci:boot-1/0000:02:00.0\tGPU 1 on gpunode", same, same])
    for exc in results.values():
        assert isinstance(exc, CollectiveError), exc
        assert str(exc).startswith(
            "init: ranks 5 and 6 of group g2 both use GPU 0 (PCI 0000:01:00.0) on gpunode; "
            "NCCL cannot put two ranks of one communicator on one GPU"
        )
        assert "FLAGS_selected_gpus" in str(exc)


# --- on a GPU --------------------------------------------------------------------------------


def _gpu_count() -> int:
    if not nccl.available(0):
        return 0
    import cupy

    return int(cupy.cuda.runtime.getDeviceCount())


GPUS = _gpu_count()
gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(GPUS == 0, reason="needs CuPy with NCCL and a visible NVIDIA GPU")


def _world_of_one_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(CONTRACT_PREFIXES)}
    env.update(PADDLE_TRAINER_ID="0", PADDLE_TRAINERS_NUM="1", FLAGS_selected_gpus="0",
               PADDLE_MASTER=f"127.0.0.1:{fixed_ports()}", PYTHONPATH=str(REPO))  # fmt: skip
    return env


@pytest.fixture(scope="module")
def world():
    """init_parallel_env(backend="nccl") in this process, world size 1 on GPU 0."""
    import paddlike.distributed as dist

    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(_world_of_one_env())
    try:
        group = dist.init_parallel_env(backend="nccl", timeout=60)
        yield group
    finally:
        dist.destroy_process_group()
        os.environ.clear()
        os.environ.update(saved)


def _cp():
    import cupy

    return cupy


@gpu
@needs_gpu
def test_init_exchanges_the_unique_id_and_builds_a_communicator_on_gpu_0(world):
    import paddlike.distributed as dist
    from paddlike.distributed.collective.group import runtime

    assert dist.get_backend() == "nccl"
    assert world.comm.transport == "nccl"
    assert world.comm.device.id == 0
    prefix = f"{runtime.prefix}/g0"
    uid = runtime.store.get(f"{prefix}/nccl-uid", timeout=5)
    assert len(nccl_setup.decode_unique_id(uid)) == 128
    key, _, description = nccl_setup.gpu_identity(0).decode().partition("\t")
    assert key.startswith(("uuid:", "pci:")) and description.startswith("GPU 0")
    assert runtime.store.get(f"{prefix}/nccl-gpu/{key}", timeout=5) == b"0"  # claimed by rank 0
    assert runtime.store.try_get(f"{prefix}/nccl-shared") is None


@gpu
@needs_gpu
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", NCCL_DTYPES)
def test_reductions_on_every_nccl_dtype_and_op(world, dtype, op):
    import paddlike.distributed as dist

    cp = _cp()
    rop = dist.ReduceOp[op]
    base = (cp.arange(1, 7) % 2).astype(dtype) if dtype == "bool" else cp.arange(1, 7, dtype=dtype)
    if op == "AVG" and dtype not in ("float16", "float32", "float64"):
        with pytest.raises(TypeError, match=r"ReduceOp\.AVG needs a floating-point array"):
            dist.all_reduce(base.copy(), rop)
        return
    x = base.copy()
    dist.all_reduce(x, rop)
    assert cp.array_equal(x, base), (x, base)  # a world of one: the reduction of one part
    x = base.copy()
    dist.reduce(x, 0, rop)
    assert cp.array_equal(x, base)
    out = cp.zeros_like(base)
    dist.reduce_scatter(out, [base.copy()], rop)
    assert cp.array_equal(out, base)


@gpu
@needs_gpu
@pytest.mark.parametrize("dtype", NCCL_DTYPES)
def test_data_movement_on_every_nccl_dtype(world, dtype):
    import paddlike.distributed as dist

    cp = _cp()
    x = cp.arange(6).astype(dtype).reshape(2, 3)
    y = x.copy()
    dist.broadcast(y, src=0)
    assert cp.array_equal(y, x)
    outs: list = []
    dist.all_gather(outs, x)
    assert len(outs) == 1 and cp.array_equal(outs[0], x)
    uneven = [cp.zeros(6, dtype)]  # another shape of the same size
    dist.all_gather(uneven, x)
    assert cp.array_equal(uneven[0], x.reshape(-1))
    gathered: list = []
    dist.gather(x, gathered, dst=0)
    assert cp.array_equal(gathered[0], x)
    z = cp.zeros_like(x)
    dist.scatter(z, [x], src=0)
    assert cp.array_equal(z, x)
    outs = []
    dist.all_to_all(outs, [x])
    assert cp.array_equal(outs[0], x)
    dist.barrier()


@gpu
@needs_gpu
def test_a_dtype_nccl_lacks_is_refused_by_name(world):
    import paddlike.distributed as dist

    g = dist.new_group([0])  # the refusal happens inside the operation and breaks its group
    try:
        with pytest.raises(TypeError, match="all_reduce: dtype int16 is not supported by NCCL"):
            dist.all_reduce(_cp().zeros(4, "int16"), group=g)
    finally:
        dist.destroy_process_group(g)


@gpu
@needs_gpu
def test_a_new_group_gets_its_own_communicator(world):
    import paddlike.distributed as dist

    cp = _cp()
    g = dist.new_group([0])
    try:
        assert g.comm is not world.comm and g.comm.transport == "nccl"
        x = cp.full(5, 3.0, cp.float32)
        dist.all_reduce(x, group=g)
        assert cp.allclose(x, 3.0)
    finally:
        dist.destroy_process_group(g)


@gpu
@needs_gpu
def test_async_tasks_run_on_the_callers_stream_after_its_earlier_work(world):
    import paddlike.distributed as dist

    cp = _cp()
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        x = cp.zeros(1 << 22, cp.float32)
        x += 2
        task = dist.all_reduce(x, sync_op=False)
        tasks = [dist.broadcast(cp.full(8, float(k), cp.float32), 0, sync_op=False)
                 for k in range(4)]  # fmt: skip
    assert task.wait() is not False
    for t in tasks:
        t.wait()
    assert task.is_completed() and all(t.is_completed() for t in tasks)
    assert float(x.sum()) == 2.0 * (1 << 22)


DEADLINE_SCRIPT = r'''
import json, time
import cupy as cp
import numpy as np
import paddlike.distributed as dist
from paddlike.distributed.collective.errors import CollectiveTimeoutError

# Spins on the global nanosecond timer, so its length is the same at any clock rate.
SPIN = """
extern "C" __global__ void spin(unsigned long long ns, int *done) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
    *done = 1;
}
"""
dist.init_parallel_env(backend="nccl", timeout=60)
g = dist.new_group([0], timeout=60)
g.timeout = 1.0  # every operation's deadline from here on (the setup had 60 s)
report = {}
stream = cp.cuda.Stream(non_blocking=True)
with stream:
    # Every array before the kernel: a new allocation (cudaMalloc) waited for it on an H200.
    done, x, after = cp.zeros(1, cp.int32), cp.ones(16, cp.float32), cp.ones(4, cp.float32)
    cp.RawKernel(SPIN, "spin")((1,), (1,), (np.uint64(4 * 10**9), done))  # 4 s
    start = time.monotonic()
    try:
        dist.all_reduce(x, group=g)  # queued behind the kernel: misses its deadline
    except CollectiveTimeoutError as exc:
        report["error"] = str(exc)
    report["waited"] = time.monotonic() - start
    try:
        dist.all_reduce(after, group=g)
    except Exception as exc:
        report["after"] = str(exc)
stream.synchronize()  # the kernel ends; the CUDA context must still be usable
report["kernel"] = time.monotonic() - start  # from the call to the kernel's end
print(json.dumps(report), flush=True)
y = cp.ones(4, cp.float32)
dist.all_reduce(y)  # the default group is untouched
print(json.dumps({"default_group_sum": float(y.sum())}), flush=True)
dist.destroy_process_group()
'''


@gpu
@needs_gpu
@pytest.mark.timeout(90)
def test_a_collective_past_its_deadline_aborts_the_communicator_and_says_so():
    # In its own process: an aborted communicator must not take this one's CUDA context.
    run = _python(DEADLINE_SCRIPT, _world_of_one_env())
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert lines, run.stderr
    report = lines[0]
    assert "NCCL did not complete before the deadline" in report.get("error", ""), report
    assert "the communicator was aborted" in report["error"]
    # ncclCommAbort frees device memory, which waits for the running kernel: the wait is
    # the deadline, or the kernel's length plus the abort, whichever is longer.
    assert 0.9 < report["waited"] < max(3.5, report["kernel"] + 3.5), report
    assert "cannot be used after an earlier failure" in report.get("after", ""), report
    assert run.returncode == 0, run.stderr
    assert lines[1] == {"default_group_sum": 4.0}


@gpu
@needs_gpu
def test_data_parallel_broadcasts_and_averages_cupy_gradients(world):
    import paddlike.distributed as dist

    cp = _cp()

    class P:
        def __init__(self, data):
            self.data, self.grad = data, None

    class Model:
        def __init__(self):
            self.params = [P(cp.arange(12, dtype=cp.float32).reshape(3, 4)),
                           P(cp.ones(1000, cp.float64)), P(cp.zeros(5, cp.float16))]  # fmt: skip

        def parameters(self):
            return iter(self.params)

        def __call__(self, x):
            return x * 2

    model = dist.DataParallel(Model(), bucket_bytes=1024)
    params = list(model.parameters())
    params[0].grad = cp.full((3, 4), 6.0, cp.float32)
    params[1].grad = cp.full(1000, 2.0, cp.float64)
    model.sync_gradients()
    assert cp.allclose(params[0].grad, 6.0) and cp.allclose(params[1].grad, 2.0)
    assert isinstance(params[2].grad, cp.ndarray) and not params[2].grad.any()  # zeros made
    assert float(model(cp.float32(21))) == 42.0


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)  # fmt: skip


@gpu
@needs_gpu
def test_backend_auto_picks_nccl_on_a_gpu():
    run = _python("""
        import cupy as cp
        import paddlike.distributed as dist
        dist.init_parallel_env()
        x = cp.ones(3, cp.float32)
        dist.all_reduce(x)
        print(dist.get_backend(), float(x.sum()))
        dist.destroy_process_group()
    """, _world_of_one_env())  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["nccl", "3.0"]


WORKER = """
import json, os, sys
import cupy as cp
import paddlike.distributed as dist
dist.init_parallel_env()
x = cp.full(4, dist.get_rank() + 1, cp.float32)
dist.all_reduce(x)
rank = dist.get_rank()
report = {k: os.environ.get(k) for k in ("FLAGS_selected_gpus", "LOCAL_RANK",
          "PADDLE_DISTRI_BACKEND", "PADDLE_WORLD_DEVICE_IDS", "PADDLE_TRAINERS_NUM")}
report.update(backend=dist.get_backend(), device=cp.cuda.Device().id, sum=float(x[0]))
with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as f:
    json.dump(report, f)
dist.destroy_process_group()
"""


def _launch(tmp: Path, *options: str, script: str = WORKER) -> subprocess.CompletedProcess[str]:
    (tmp / "worker.py").write_text(script)
    out = tmp / "out"
    out.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(CONTRACT_PREFIXES)}
    env["PYTHONPATH"] = str(REPO)
    argv = [sys.executable, "-m", "paddlike.launch", "--log_dir", str(tmp / "log"), *options,
            str(tmp / "worker.py"), str(out)]  # fmt: skip
    return subprocess.run(argv, cwd=tmp, env=env, capture_output=True, text=True, timeout=180)


def _logs(tmp: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                     for p in sorted((tmp / "log").glob("workerlog.*")))  # fmt: skip


@gpu
@needs_gpu
def test_a_launch_on_this_node_runs_one_nccl_worker_per_gpu_by_default(tmp_path):
    run = _launch(tmp_path)
    assert run.returncode == 0, run.stderr + _logs(tmp_path)
    reports = [json.loads(p.read_text()) for p in sorted((tmp_path / "out").glob("rank*.json"))]
    assert len(reports) == GPUS
    for local, r in enumerate(reports):
        assert r["backend"] == r["PADDLE_DISTRI_BACKEND"] == "nccl"
        assert r["FLAGS_selected_gpus"] == r["LOCAL_RANK"] == str(local)
        assert r["device"] == local
        assert r["sum"] == GPUS * (GPUS + 1) / 2
    assert "devices gpus 0" in run.stderr  # the banner


@gpu
@needs_gpu
def test_two_ranks_forced_onto_one_gpu_fail_naming_both_ranks_and_the_device(tmp_path):
    # CPU workers get no FLAGS_selected_gpus; the script names GPU 0 for both (by LOCAL_RANK
    # rank 1 would ask for GPU 1, which a one-GPU machine refuses before NCCL is asked).
    script = """
import os
os.environ["FLAGS_selected_gpus"] = "0"
import paddlike.distributed as dist
dist.init_parallel_env(backend="nccl", timeout=60)
"""
    run = _launch(tmp_path, "--devices", "cpu", "--nproc_per_node", "2", script=script)
    assert run.returncode != 0
    logs = _logs(tmp_path)
    assert "init: ranks 0 and 1 of group g0 both use GPU 0" in logs, logs


@gpu
@needs_gpu
def test_nvml_finds_the_gpus_cuda_sees_quickly_with_their_uuids():
    from paddlike.launch.context.devices import probe_gpus, visible_gpus

    cp = _cp()
    start = time.perf_counter()
    found = probe_gpus({})
    seconds = time.perf_counter() - start
    print(f"probe_gpus: {found.count} GPU(s) by {found.source} in {seconds * 1000:.1f} ms")
    assert (found.source, found.count) == ("NVML", GPUS)
    raw = cp.cuda.runtime.getDeviceProperties(0)["uuid"]
    cuda_uuid = raw.hex() if isinstance(raw, bytes) else str(raw).replace("-", "").lower()
    assert found.uuids[0].removeprefix("GPU-").replace("-", "") == cuda_uuid
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": found.uuids[0]}, found).physical == ("0",)
    assert seconds < 0.5


MIXED = """
import json, os, sys
import cupy as cp
import numpy as np
import paddlike.distributed as dist
dist.init_parallel_env()
h = np.full(4, dist.get_rank() + 1, np.float32)
d = cp.full(4, dist.get_rank() + 1, cp.float32)
t = dist.all_reduce(d, sync_op=False)
dist.all_reduce(h)
t.wait()
g = dist.get_group(0)
report = {"host": float(h[0]), "device": float(d[0]), "lanes": sorted(g.lanes),
          "device_transport": g.lanes["device"].comm.transport}
with open(os.path.join(sys.argv[1], f"rank{dist.get_rank()}.json"), "w") as f:
    json.dump(report, f)
dist.destroy_process_group()
"""


@gpu
@needs_gpu
def test_host_and_device_arrays_in_one_launched_job_on_this_node(tmp_path):
    run = _launch(tmp_path, script=MIXED)
    assert run.returncode == 0, run.stderr + _logs(tmp_path)
    reports = [json.loads(p.read_text()) for p in sorted((tmp_path / "out").glob("rank*.json"))]
    assert len(reports) == GPUS
    for r in reports:
        assert r["host"] == r["device"] == GPUS * (GPUS + 1) / 2
        assert r["lanes"] == ["device", "host"] and r["device_transport"] == "nccl"
