"""--numa_binding on a faked NUMA machine: the real launcher in a private mount namespace
whose /sys/devices/system/node lists two nodes of one CPU each (this machine's first two
CPUs), whose /proc/driver lists fake GPUs and whose /sys/bus/pci/devices gives each GPU
its node. The workers report the CPUs the kernel lets them run on
(`os.sched_getaffinity`) and their memory policy (/proc/self/numa_maps).

Nothing touches the GPUs: the workers only report. The namespace's mounts vanish with its
last process; the test leaves nothing behind.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
LAUNCH = [sys.executable, "-m", "paddlike.launch"]
REPORT = """
import json, os, sys
with open("/proc/self/numa_maps") as f:
    policy = f.readline().split()[1]
rank = os.environ["RANK"]
out = {"rank": rank, "cpus": sorted(os.sched_getaffinity(0)), "policy": policy,
       "LOCAL_RANK": os.environ["LOCAL_RANK"],
       "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}
with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as f:
    json.dump(out, f)
"""
# $CPU0/$CPU1: node 0's and node 1's CPU; $GPU_NODES: the node of each fake GPU, in order
FAKE_MACHINE = r"""
set -e
mount -t tmpfs none /sys/devices/system/node
mkdir /sys/devices/system/node/node0 /sys/devices/system/node/node1
echo "$CPU0" > /sys/devices/system/node/node0/cpulist
echo "$CPU1" > /sys/devices/system/node/node1/cpulist
echo 0-1 > /sys/devices/system/node/possible
mount -t tmpfs none /proc/driver
mkdir -p /proc/driver/nvidia/gpus
mount -t tmpfs none /sys/bus/pci/devices
i=0
for node in $GPU_NODES; do
  address="0000:$(printf %02x $((i + 1))):00.0"
  mkdir /proc/driver/nvidia/gpus/$address /sys/bus/pci/devices/$address
  echo "$node" > /sys/bus/pci/devices/$address/numa_node
  i=$((i + 1))
done
exec "$@"
"""


@functools.cache
def _unavailable() -> str | None:
    if sys.platform != "linux" or shutil.which("unshare") is None:
        return "needs Linux and unshare(1)"
    if len(os.sched_getaffinity(0)) < 2:
        return "needs two CPUs to fake two NUMA nodes"
    if not os.path.isdir("/proc/driver") or not os.path.isdir("/sys/devices/system/node"):
        return "this kernel has no /proc/driver or /sys/devices/system/node to mount over"
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c",
         "mount -t tmpfs none /sys/devices/system/node"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    if probe.returncode != 0:
        return f"a private mount namespace is not allowed here: {probe.stderr.strip()}"
    return None


@pytest.fixture(autouse=True)
def _needs_mount_namespaces() -> None:
    reason = _unavailable()
    if reason:
        pytest.skip(reason)


CPU0, CPU1 = sorted(os.sched_getaffinity(0))[:2]


def launch(tmp: Path, gpu_nodes: str, *options: str) -> subprocess.CompletedProcess[str]:
    """The launcher on the fake machine; each worker writes tmp/out/rank<N>.json."""
    out = tmp / "out"
    out.mkdir(exist_ok=True)
    script = tmp / "report.py"
    script.write_text(REPORT)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PADDLIKE_", "PADDLE_", "PET_", "CUDA_VISIBLE"))}  # fmt: skip
    env.update(PYTHONPATH=str(REPO), PADDLIKE_GPU_PROBE="proc", CPU0=str(CPU0),
               CPU1=str(CPU1), GPU_NODES=gpu_nodes)  # fmt: skip
    argv = [*LAUNCH, "--log_dir", str(tmp / "log"), *options, str(script), str(out)]
    return subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", FAKE_MACHINE, "sh", *argv],
        cwd=tmp, env=env, capture_output=True, text=True, timeout=90,
    )  # fmt: skip


def reports(tmp: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((tmp / "out").glob("rank*.json"))]


@pytest.mark.timeout(120)
def test_cpu_workers_are_spread_over_the_two_nodes_and_prefer_their_memory(tmp_path):
    run = launch(tmp_path, "", "--nproc_per_node", "2", "--numa_binding", "node")
    assert run.returncode == 0, run.stderr
    got = reports(tmp_path)
    assert [r["cpus"] for r in got] == [[CPU0], [CPU1]]
    # node 0 is real: its memory is preferred; the kernel refuses the fake node 1 (CPUs hold)
    assert got[0]["policy"] == "prefer:0"
    assert f"numa binding: trainer 1: cpus {CPU1} (NUMA node 1, CPU workers in blocks)" in (
        run.stderr
    )


@pytest.mark.timeout(120)
def test_gpu_workers_follow_their_gpus_node_not_their_rank(tmp_path):
    # GPU 0 hangs off node 1, GPU 1 off node 0
    run = launch(tmp_path, "1 0", "--numa-binding", "exclusive")
    assert run.returncode == 0, run.stderr
    got = reports(tmp_path)
    assert [(r["LOCAL_RANK"], r["cpus"]) for r in got] == [("0", [CPU1]), ("1", [CPU0])]


@pytest.mark.timeout(120)
def test_virtual_local_rank_gives_each_worker_its_gpu_as_its_only_one(tmp_path):
    run = launch(tmp_path, "1 0", "--virtual-local-rank", "--numa_binding", "node")
    assert run.returncode == 0, run.stderr
    got = reports(tmp_path)
    assert [(r["LOCAL_RANK"], r["CUDA_VISIBLE_DEVICES"]) for r in got] == [("0", "0"), ("0", "1")]
    assert [r["cpus"] for r in got] == [[CPU1], [CPU0]]


@pytest.mark.timeout(120)
def test_dry_run_shows_each_workers_cpus_and_why(tmp_path):
    run = launch(tmp_path, "1 0", "--dry_run", "--bind_cores_to_rank")
    assert run.returncode == 0, run.stderr
    assert f"  numa binding: cpus {CPU1} (GPU 0's NUMA node 1)" in run.stdout
    assert f"  numa binding: cpus {CPU0} (GPU 1's NUMA node 0)" in run.stdout


@pytest.mark.timeout(120)
def test_exclusive_with_two_workers_on_one_core_exits_2_before_anything_starts(tmp_path):
    run = launch(tmp_path, "0 0", "--numa_binding", "exclusive")
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "paddlike.launch: error: --numa_binding: exclusive: NUMA node 0 has 1 core for 2 "
        "workers; use --numa_binding node (shared cores) or fewer workers"
    ]
    assert reports(tmp_path) == [] and not (tmp_path / "log").exists()
