"""GPU nodes without a GPU: the real launcher in a private mount namespace whose
/proc/driver is a tmpfs listing N fake GPUs (PADDLIKE_GPU_PROBE=proc, so NVML is not
asked). The workers only dump their environment and never touch CUDA.

Covers the defaults (one worker per visible GPU, for 1, 2, 4 and 8 GPUs),
CUDA_VISIBLE_DEVICES subsets and UUIDs, --gpus, --nproc_per_node slices and words, the
errors (exit 2, one line, nothing started), and many-node jobs on namespace nodes: two
GPU nodes, and a GPU node with a CPU node, which must refuse to run together.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.support.netns import netns_cluster

REPO = Path(__file__).resolve().parents[2]
DUMP_ENV = REPO / "tests" / "support" / "workers" / "dump_env.py"
LAUNCH = [sys.executable, "-m", "paddlike.launch"]
# Mounts a tmpfs on /proc/driver (private to this process's new mount namespace), lists
# $FAKE_GPUS fake PCI devices there, then execs the command.
FAKE_DRIVER = (
    "mount -t tmpfs none /proc/driver && mkdir -p /proc/driver/nvidia/gpus && "
    'i=0; while [ "$i" -lt "$FAKE_GPUS" ]; do '
    'mkdir "/proc/driver/nvidia/gpus/0000:$(printf %02x $((i + 1))):00.0"; i=$((i + 1)); done; '
    'exec "$@"'
)


@functools.cache
def _unavailable() -> str | None:
    if sys.platform != "linux" or shutil.which("unshare") is None:
        return "needs Linux and unshare(1)"
    if not os.path.isdir("/proc/driver"):
        return "this kernel has no /proc/driver to mount over"
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs none /proc/driver"],
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


def on_fake_gpus(n: int, argv: Sequence[str]) -> list[str]:
    """`argv` on a node whose driver lists `n` GPUs (0 = a node without GPUs)."""
    return ["env", f"FAKE_GPUS={n}", "unshare", "-m", "sh", "-c", FAKE_DRIVER, "sh", *argv]


def launcher_env(cvd: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PADDLIKE_", "PADDLE_", "CUDA_VISIBLE"))}  # fmt: skip
    env.update(PADDLIKE_GPU_PROBE="proc", PYTHONPATH=str(REPO))
    if cvd is not None:
        env["CUDA_VISIBLE_DEVICES"] = cvd
    return env


def launch(
    tmp: Path, gpus: int, *options: str, cvd: str | None = None, out: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """The launcher on a fake `gpus`-GPU node; workers dump their env into `out`."""
    out = out or tmp / "env"
    out.mkdir(exist_ok=True)
    argv = [*LAUNCH, "--log_dir", str(tmp / "log"), *options, str(DUMP_ENV), str(out)]
    return subprocess.run(on_fake_gpus(gpus, argv), cwd=tmp, env=launcher_env(cvd),
                          capture_output=True, text=True, timeout=90)  # fmt: skip


def dry_run(tmp: Path, gpus: int, *options: str, cvd: str | None = None):
    """(the devices line, [(device text, env)] per worker) of a --dry_run on a fake node."""
    run = launch(tmp, gpus, "--dry_run", *options, cvd=cvd)
    assert run.returncode == 0, run.stderr
    why = re.search(r"^devices: (.*)$", run.stdout, re.M)
    workers = []
    for block in run.stdout.split("\n\n")[1:]:
        head = re.match(r"\[trainer rank \d+\] local index \d+, device (.*?), endpoint", block)
        assert head, block
        env = dict(re.findall(r"^    ([A-Za-z_][A-Za-z0-9_]*)=(.*)$", block, re.M))
        workers.append((head.group(1), env))
    return (why.group(1) if why else ""), workers


def dumped(out: Path) -> list[dict[str, str]]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("env.*.json"))]


def assert_gpu_worker(env: dict[str, str], local: int, gpus: str) -> None:
    """The device variables of one GPU worker agree with each other."""
    assert env["PADDLE_DISTRI_BACKEND"] == "nccl"
    assert env["LOCAL_RANK"] == env["PADDLE_LOCAL_RANK"] == str(local)
    assert env["FLAGS_selected_gpus"] == env["PADDLE_LOCAL_DEVICE_IDS"] == gpus
    rank = int(env["PADDLE_TRAINER_ID"])
    assert env["PADDLE_WORLD_DEVICE_IDS"].split(",")[rank] == gpus.replace(",", ":")


# --- one node ----------------------------------------------------------------------------


def test_dry_run_on_a_fake_two_gpu_node_shows_two_gpu_workers_by_default(tmp_path):
    why, workers = dry_run(tmp_path, 2)
    assert why == "2 GPUs found by /proc/driver/nvidia/gpus: one worker per GPU"
    assert [d for d, _ in workers] == ["gpu 0", "gpu 1"]
    for local, (_, env) in enumerate(workers):
        assert_gpu_worker(env, local, str(local))
    assert not (tmp_path / "log").exists()


@pytest.mark.parametrize("n", [1, 4, 8])
def test_every_visible_gpu_gets_one_worker(tmp_path, n):
    _, workers = dry_run(tmp_path, n)
    assert len(workers) == n
    for local, (device, env) in enumerate(workers):
        assert device == f"gpu {local}"
        assert_gpu_worker(env, local, str(local))
        assert env["PADDLE_WORLD_DEVICE_IDS"] == ",".join(str(i) for i in range(n))


def test_a_real_launch_on_two_fake_gpus_gives_each_worker_its_gpu_and_nccl(tmp_path):
    run = launch(tmp_path, 2)
    assert run.returncode == 0, run.stderr
    envs = dumped(tmp_path / "env")
    assert len(envs) == 2
    for env in envs:
        local = int(env["LOCAL_RANK"])
        assert_gpu_worker(env, local, str(local))
        assert env["PADDLE_WORLD_DEVICE_IDS"] == "0,1"
        assert env["PADDLE_TRAINERS_NUM"] == "2"
    assert "devices gpus 0,1" in run.stderr  # the banner


def test_cuda_visible_devices_two_of_four_gives_two_workers_numbered_0_and_1(tmp_path):
    run = launch(tmp_path, 4, cvd="2,3")
    assert run.returncode == 0, run.stderr
    envs = sorted(dumped(tmp_path / "env"), key=lambda e: e["LOCAL_RANK"])
    assert [e["FLAGS_selected_gpus"] for e in envs] == ["0", "1"]
    assert all(e["CUDA_VISIBLE_DEVICES"] == "2,3" for e in envs)  # inherited, untouched


DRY_RUNS = [
    # (fake GPUs, CUDA_VISIBLE_DEVICES, options, device text per worker, words in the why)
    (4, "3,1", (), ["gpu 0 (physical 3)", "gpu 1"], "leaves 2 of 4"),
    (2, "GPU-5e1f,MIG-77ab", (), ["gpu 0 (physical GPU-5e1f)", "gpu 1 (physical MIG-77ab)"],
     "one worker per GPU"),
    (4, "0,1,-1,3", (), ["gpu 0", "gpu 1"], "CUDA ignores '-1'"),
    (4, None, ("--gpus", "1,3"), ["gpu 1", "gpu 3"], "--gpus 1,3: one worker per GPU"),
    (4, "2,3", ("--gpus", "3"), ["gpu 1 (physical 3)"], "physical ids"),
    (8, None, ("--nproc_per_node", "2"), ["gpu 0,1,2,3", "gpu 4,5,6,7"], "2 slices of 4"),
    (4, None, ("--nproc_per_node", "gpu"), ["gpu 0", "gpu 1", "gpu 2", "gpu 3"], "per GPU"),
    (2, None, ("--nproc_per_node", "auto"), ["gpu 0", "gpu 1"], "one worker per GPU"),
    (2, None, ("--devices", "cpu", "--nproc_per_node", "3"), ["cpu"] * 3, "--devices cpu"),
    (2, "", (), ["cpu"], "no GPU visible"),
    (0, None, (), ["cpu"], "no NVIDIA GPU found (/proc/driver/nvidia/gpus is empty)"),
]  # fmt: skip


@pytest.mark.parametrize(("n", "cvd", "options", "devices", "why_has"), DRY_RUNS)
def test_dry_run_says_which_gpus_each_worker_got_and_why(
    tmp_path, n, cvd, options, devices, why_has
):
    why, workers = dry_run(tmp_path, n, *options, cvd=cvd)
    assert [d for d, _ in workers] == devices
    assert why_has in why
    for _, env in workers:
        gpu = env.get("FLAGS_selected_gpus")
        assert env["PADDLE_DISTRI_BACKEND"] == ("nccl" if gpu else "gloo")


def test_nproc_per_node_cpu_starts_one_cpu_worker_per_cpu(tmp_path):
    _, workers = dry_run(tmp_path, 2, "--nproc_per_node", "cpu")
    assert [d for d, _ in workers] == ["cpu"] * (os.cpu_count() or 1)


ERRORS = [
    (2, None, ("--gpus", "0,4"), "--gpus: GPU 4 does not exist, this node has 2"),
    (4, None, ("--nproc_per_node", "3"), "--nproc_per_node: 3 does not divide the 4 GPUs"),
    (1, None, ("--nproc_per_node", "2"), "--nproc_per_node: 2 workers on the 1 GPU of"),
    (2, "1,1", (), "CUDA_VISIBLE_DEVICES: GPU 1 is listed twice in '1,1'"),
    (0, None, ("--nproc_per_node", "gpu"), "--nproc_per_node: 'gpu' needs a visible NVIDIA GPU"),
    (2, "0,1", ("--gpus", "2"), "--gpus: 2 is not in CUDA_VISIBLE_DEVICES='0,1'"),
]  # fmt: skip


@pytest.mark.parametrize(("n", "cvd", "options", "message"), ERRORS)
def test_device_errors_exit_2_with_one_line_and_start_nothing(tmp_path, n, cvd, options, message):
    run = launch(tmp_path, n, *options, cvd=cvd)
    assert run.returncode == 2, run.stdout + run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith(f"paddlike.launch: error: {message}"), lines[0]
    assert not (tmp_path / "log").exists()
    assert not list((tmp_path / "env").iterdir())


# --- many nodes (network namespaces) -------------------------------------------------------


def start_on_node(node, gpus: int, ips: str, log_dir: Path, out: Path, *options: str):
    argv = [*LAUNCH, "--ips", ips, "--log_dir", str(log_dir), *options, str(DUMP_ENV), str(out)]
    return node.popen(on_fake_gpus(gpus, argv), env=launcher_env(), cwd=log_dir.parent,
                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip


@pytest.mark.netns
def test_two_nodes_with_two_fake_gpus_each_run_four_gpu_workers(tmp_path):
    out = tmp_path / "env"
    out.mkdir()
    with netns_cluster(2, ["gpunodea", "gpunodeb"]) as cluster:
        procs = [
            start_on_node(node, 2, "gpunodea,gpunodeb", tmp_path / f"log{i}", out)
            for i, node in enumerate(cluster.nodes)
        ]
        outs = [p.communicate(timeout=90)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    envs = dumped(out)
    assert sorted(int(e["PADDLE_TRAINER_ID"]) for e in envs) == [0, 1, 2, 3]
    for env in envs:
        local = int(env["LOCAL_RANK"])
        assert int(env["PADDLE_TRAINER_ID"]) == 2 * int(env["NODE_RANK"]) + local
        assert_gpu_worker(env, local, str(local))
        assert env["PADDLE_WORLD_DEVICE_IDS"] == "0,1,0,1"
        assert env["PADDLE_TRAINERS_NUM"] == "4"


@pytest.mark.netns
@pytest.mark.parametrize(
    "options", [(), ("--nproc_per_node", "1")], ids=["defaults", "same-worker-count"]
)
def test_a_gpu_node_and_a_cpu_node_in_one_job_both_exit_2_naming_the_cpu_node(
    tmp_path, options
):
    out = tmp_path / "env"
    out.mkdir()
    with netns_cluster(2, ["gpunode", "cpunode"]) as cluster:
        procs = [
            start_on_node(node, gpus, "gpunode,cpunode", tmp_path / f"log{i}", out, *options)
            for i, (node, gpus) in enumerate(zip(cluster.nodes, (2, 0), strict=True))
        ]
        outs = [p.communicate(timeout=90)[0].decode() for p in procs]
        cpu_node = cluster.nodes[1].addr
    assert [p.returncode for p in procs] == [2, 2], outs
    for text in outs:
        assert re.search(rf"node 1 \([^)]*{cpu_node}\) disagrees on", text), text
    if options:  # the same number of workers: only the devices differ
        assert all("disagrees on devices per node" in text for text in outs), outs
    assert not list(out.iterdir())  # no worker started anywhere


# --- the default launch on a GPU node, CuPy stand-in reporting GPUs and NCCL -------------

DOUBLES = REPO / "tests" / "support" / "doubles"
EXAMPLES = REPO / "examples"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("libnccl", [True, False], ids=["libnccl", "no-libnccl"])
@pytest.mark.parametrize("example", ["hello_allreduce.py", "ddp_train.py", "global_linear.py"])
def test_the_numpy_examples_run_under_the_default_launch_on_a_gpu_node(tmp_path, example, libnccl):
    """CuPy reports two GPUs (the stand-in on PYTHONPATH) and NCCL loads or not: either way
    the examples' numpy arrays go through the CPU backend in the job the launcher starts."""
    env = launcher_env()
    env["PYTHONPATH"] = f"{REPO}:{DOUBLES}"
    env["CUPY_DOUBLE_NCCL"] = "1" if libnccl else "0"
    argv = [*LAUNCH, "--nproc_per_node", "2", "--log_dir", str(tmp_path / "log"),
            str(EXAMPLES / example)]  # fmt: skip
    run = subprocess.run(on_fake_gpus(2, argv), cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=200)  # fmt: skip
    logs = "".join(p.read_text() for p in sorted((tmp_path / "log").glob("workerlog.*")))
    assert run.returncode == 0, run.stderr + logs
    assert "devices gpus 0,1" in run.stderr
    assert "Traceback" not in logs
