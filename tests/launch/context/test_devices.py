"""Devices per worker: the visible GPUs by default, CUDA_VISIBLE_DEVICES as CUDA reads it,
--gpus, --nproc_per_node slices and words, CPU fall-back; GPUs found without CuPy.

What the node has (`NodeGpus`) is passed in: this machine has no GPU, so that is the one
fake. Finding GPUs is tested against real directories and a real (absent) NVML library.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from paddlike.launch.context.devices import (
    NVIDIA_GPUS_DIR,
    NodeGpus,
    assign_devices,
    count_gpus,
    probe_gpus,
    visible_gpus,
)
from paddlike.launch.context.options import UsageError, parse_options

UUIDS = tuple(f"GPU-{i}aaaaaaa-0000-1111-2222-33333333333{i}" for i in range(4))


def proc(n: int) -> NodeGpus:
    return NodeGpus(n, (), NVIDIA_GPUS_DIR)


def nvml(n: int) -> NodeGpus:
    return NodeGpus(n, UUIDS[:n], "NVML")


NONE = NodeGpus(0, (), "", f"{NVIDIA_GPUS_DIR} is missing")


def assign(found: NodeGpus, cvd: str | None = None, gpus=None, nproc=None, **kw):
    environ = {} if cvd is None else {"CUDA_VISIBLE_DEVICES": cvd}
    return assign_devices(gpus, nproc, environ=environ, found=found, **kw)


# --- defaults: one worker per visible GPU ------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_a_node_with_gpus_gets_one_worker_per_gpu_by_default(n):
    d = assign(proc(n))
    assert d.kind == "gpu"
    assert d.per_worker == tuple((str(i),) for i in range(n))
    assert d.physical == d.per_worker
    assert d.why == f"{n} GPU{'s' if n > 1 else ''} found by {NVIDIA_GPUS_DIR}: one worker per GPU"


def test_a_node_without_gpus_gets_one_cpu_worker_and_says_why():
    d = assign(NONE)
    assert (d.kind, d.per_worker) == ("cpu", ((),))
    assert d.why == f"no NVIDIA GPU found ({NVIDIA_GPUS_DIR} is missing): CPU workers"


def test_cpu_mode_with_nproc_per_node():
    assert assign(NONE, nproc=3).per_worker == ((), (), ())


def test_cuda_visible_devices_subset_gives_workers_their_visible_positions():
    d = assign(proc(4), "2,3")
    assert d.per_worker == (("0",), ("1",))
    assert d.physical == (("2",), ("3",))
    assert "CUDA_VISIBLE_DEVICES='2,3' leaves 2 of 4" in d.why


def test_an_empty_cuda_visible_devices_hides_every_gpu():
    d = assign(proc(2), "")
    assert d.kind == "cpu"
    assert d.why.startswith("no GPU visible (2 GPUs found by")


def test_an_entry_that_names_no_gpu_hides_itself_and_every_later_entry_as_in_cuda():
    v = visible_gpus({"CUDA_VISIBLE_DEVICES": "0,2,-1,1"}, proc(4))
    assert v.physical == ("0", "2")
    assert "CUDA ignores '-1' and every entry after it" in v.note
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "1,7,0"}, proc(2)).physical == ("1",)


def test_uuid_entries_are_matched_through_nvml_by_unique_prefix():
    v = visible_gpus({"CUDA_VISIBLE_DEVICES": f"{UUIDS[3]},GPU-1aa"}, nvml(4))
    assert v.physical == ("3", "1")


def test_an_unknown_gpu_uuid_under_nvml_hides_the_rest():
    v = visible_gpus({"CUDA_VISIBLE_DEVICES": f"{UUIDS[0]},GPU-ffff,{UUIDS[1]}"}, nvml(2))
    assert v.physical == ("0",)


def test_uuid_entries_count_as_visible_gpus_in_order_when_only_proc_is_known():
    d = assign(proc(2), "GPU-aaaa,MIG-bbbb,GPU-cccc")
    assert d.per_worker == (("0",), ("1",))  # never more than the node's 2
    assert d.physical == (("GPU-aaaa",), ("MIG-bbbb",))


def test_a_gpu_listed_twice_in_cuda_visible_devices_is_refused():
    with pytest.raises(UsageError, match=r"^CUDA_VISIBLE_DEVICES: GPU 1 is listed twice in "
                       r"'1,0,1'; two workers cannot share one GPU"):  # fmt: skip
        assign(proc(2), "1,0,1")
    with pytest.raises(UsageError, match="GPU 0 is listed twice"):
        assign(nvml(2), f"0,{UUIDS[0]}")  # the same GPU by index and by UUID


# --- --nproc_per_node: slices and torchrun's words --------------------------------------


def test_nproc_per_node_splits_the_visible_gpus_into_contiguous_slices():
    d = assign(proc(4), nproc=2)
    assert d.per_worker == (("0", "1"), ("2", "3"))
    assert d.why.endswith("--nproc_per_node 2 splits them into 2 slices of 2")
    assert d.per_node == "4 GPUs"


def test_a_split_that_does_not_divide_is_an_error_naming_the_option():
    with pytest.raises(UsageError, match=r"^--nproc_per_node: 3 does not divide the 4 GPUs of "
                       r"this node \(4 GPUs found by .*\); give a divisor of 4$"):  # fmt: skip
        assign(proc(4), nproc=3)


def test_more_workers_than_gpus_is_refused_before_two_ranks_share_a_gpu():
    with pytest.raises(UsageError, match=r"^--nproc_per_node: 2 workers on the 1 GPU of this "
                       r"node \(.*\) would put two workers on one GPU, which NCCL "):  # fmt: skip
        assign(proc(1), nproc=2)


def test_nproc_per_node_gpu_is_one_worker_per_visible_gpu_and_an_error_without_one():
    assert assign(proc(2), nproc_kind="gpu").per_worker == (("0",), ("1",))
    with pytest.raises(UsageError, match=r"^--nproc_per_node: 'gpu' needs a visible NVIDIA GPU"):
        assign(NONE, nproc_kind="gpu")


def test_nproc_per_node_cpu_is_one_cpu_worker_per_cpu_even_with_gpus():
    d = assign(proc(2), nproc_kind="cpu", cpu_count=6)
    assert (d.kind, d.nproc) == ("cpu", 6)


def test_nproc_per_node_auto_is_the_gpus_if_any_else_the_cpus():
    assert assign(proc(2), nproc_kind="auto", cpu_count=6).per_worker == (("0",), ("1",))
    assert assign(NONE, nproc_kind="auto", cpu_count=6).nproc == 6


def test_devices_cpu_runs_cpu_workers_on_a_gpu_node():
    d = assign(proc(8), cpu_only=True, nproc=2)
    assert (d.kind, d.nproc, d.per_node) == ("cpu", 2, "cpu")
    assert d.why == "--devices cpu: CPU workers"


# --- --gpus: physical ids ---------------------------------------------------------------


def test_one_worker_per_listed_gpu():
    d = assign(proc(2), gpus=("0", "1"))
    assert (d.kind, d.per_worker) == ("gpu", (("0",), ("1",)))


def test_gpus_with_nproc_per_node_gives_contiguous_slices():
    assert assign(proc(4), gpus=("0", "1", "2", "3"), nproc=2).per_worker == (
        ("0", "1"),
        ("2", "3"),
    )


def test_ids_are_given_relative_to_cuda_visible_devices():
    d = assign(proc(8), "5,3", gpus=("3", "5"))
    assert d.per_worker == (("1",), ("0",))
    assert d.physical == (("3",), ("5",))


def test_gpu_ids_find_their_uuid_entry_through_nvml():
    assert assign(nvml(4), f"{UUIDS[2]},{UUIDS[1]}", gpus=("1",)).per_worker == (("1",),)


def test_an_id_outside_cuda_visible_devices_is_an_error():
    with pytest.raises(UsageError, match=r"^--gpus: 1 is not in CUDA_VISIBLE_DEVICES='2,3'"):
        assign(proc(4), "2,3", gpus=("1",))


def test_no_gpu_on_the_node_is_an_error():
    with pytest.raises(UsageError, match=r"^--gpus: no NVIDIA GPU found on this node"):
        assign(NONE, gpus=("0",))


def test_a_gpu_beyond_the_count_is_an_error():
    with pytest.raises(UsageError, match=r"^--gpus: GPU 2 does not exist, this node has 2"):
        assign(proc(2), gpus=("0", "2"))


def test_dry_run_accepts_missing_gpus():
    assert assign(NONE, gpus=("0", "1"), dry_run=True).nproc == 2


def test_the_old_gpu_count_keyword_still_works():
    d = assign_devices(("0", "1"), None, environ={}, gpu_count=2)
    assert d.per_worker == (("0",), ("1",))


# --- options ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "fields"),
    [
        (["--nproc_per_node", "gpu"], {"nproc_per_node": None, "nproc_per_node_kind": "gpu"}),
        (["--nproc_per_node", "AUTO"], {"nproc_per_node_kind": "auto"}),
        (["--devices", "cpu"], {"gpus": None, "cpu_only": True}),
        (["--gpus", "cpu", "--nproc_per_node", "2"], {"cpu_only": True, "nproc_per_node": 2}),
    ],
)
def test_device_words_are_parsed(argv, fields):
    o = parse_options([*argv, "t.py"], {})
    assert {k: getattr(o, k) for k in fields} == fields


OPTION_ERRORS = [
    (["--nproc_per_node", "x"],
     "--nproc_per_node: expected a positive integer, got 'x'; or gpu, cpu, auto (as in torchrun)"),
    (["--gpus", "0,1", "--nproc_per_node", "cpu"],
     "--nproc_per_node: 'cpu' contradicts --gpus 0,1"),
    (["--devices", "cpu", "--nproc_per_node", "gpu"],
     "--nproc_per_node: 'gpu' contradicts --devices cpu"),
    (["--server_num", "1", "--nproc_per_node", "auto"],
     "--nproc_per_node: not used in parameter-server mode"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "message"), OPTION_ERRORS)
def test_device_option_errors_name_the_option_and_value(argv, message):
    with pytest.raises(UsageError) as err:
        parse_options([*argv, "t.py"], {})
    assert str(err.value).startswith(message)


# --- finding GPUs ----------------------------------------------------------------------


def test_count_gpus_reads_the_driver_directory(tmp_path):
    for bus in ("0000:01:00.0", "0000:02:00.0"):
        (tmp_path / bus).mkdir()
    assert count_gpus(str(tmp_path)) == 2
    assert count_gpus(str(tmp_path / "absent")) == 0


def test_probe_falls_back_to_proc_when_nvml_cannot_be_loaded(tmp_path):
    (tmp_path / "0000:01:00.0").mkdir()
    ctl = tmp_path / "nvidiactl"
    ctl.touch()
    found = probe_gpus({}, gpus_dir=str(tmp_path), nvidia_ctl=str(ctl), library="libabsent.so.1")
    assert (found.count, found.source) == (1, str(tmp_path))


def test_probe_says_what_it_looked_at_when_it_finds_nothing(tmp_path):
    ctl = tmp_path / "nvidiactl"
    ctl.touch()
    found = probe_gpus({}, gpus_dir=str(tmp_path / "gpus"), nvidia_ctl=str(ctl),
                       library="libabsent.so.1")  # fmt: skip
    assert found.count == 0
    assert found.tried == f"NVML (libabsent.so.1) not loadable; {tmp_path}/gpus is missing"


def test_proc_probe_skips_nvml_and_a_bad_probe_name_is_an_error(tmp_path):
    found = probe_gpus({"PADDLIKE_GPU_PROBE": "proc"}, gpus_dir=str(tmp_path),
                       nvidia_ctl="/", library="libabsent.so.1")  # fmt: skip
    assert "NVML" not in found.tried
    with pytest.raises(UsageError, match=r"^PADDLIKE_GPU_PROBE: expected auto, proc or nvml"):
        probe_gpus({"PADDLIKE_GPU_PROBE": "cuda"})


def test_finding_gpus_on_a_cpu_node_imports_no_ctypes():
    # Its time is the launch benchmark's (bench/launch.py), not a unit test's: under load a
    # timed assertion here failed at 21 ms.
    code = (
        "import sys\n"
        "from paddlike.launch.context.devices import probe_gpus\n"
        "found = probe_gpus({})\n"
        "print(found.count, 'ctypes' in sys.modules)\n"
    )
    if os.path.exists("/dev/nvidiactl"):
        pytest.skip("this node has an NVIDIA driver: NVML is tried here")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=30, check=True).stdout.split()  # fmt: skip
    assert out == ["0", "False"]


# --- NVML through ctypes, against a stand-in driver library --------------------------------

FAKE_NVML = r"""
#include <stdio.h>
#include <stdlib.h>
static char devices[64];  /* handles are real pointers: 64-bit values must pass through */
static int inits;
static unsigned count(void) { const char *c = getenv("FAKE_NVML_GPUS"); return c ? atoi(c) : 0; }
int nvmlInit_v2(void) { inits++; return 0; }
int nvmlShutdown(void) { inits--; return inits < 0 ? 3 : 0; }
int nvmlDeviceGetCount_v2(unsigned *n) { *n = count(); return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, char **h) {
    if (i >= count()) return 2;
    *h = &devices[i];
    return 0;
}
int nvmlDeviceGetUUID(char *h, char *buf, unsigned len) {
    snprintf(buf, len, "GPU-%08d-1111-2222-3333-444444444444", (int)(h - devices));
    return 0;
}
"""


@pytest.fixture(scope="module")
def fake_nvml(tmp_path_factory) -> str:
    """A libnvidia-ml.so.1 answering like the driver's, for FAKE_NVML_GPUS GPUs."""
    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler (cc) to build a stand-in NVML library")
    d = tmp_path_factory.mktemp("nvml")
    (d / "nvml.c").write_text(FAKE_NVML)
    lib = d / "libnvidia-ml.so.1"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(d / "nvml.c")],
                   check=True, capture_output=True, timeout=60)  # fmt: skip
    return str(d)


def test_nvml_is_read_through_ctypes_with_every_gpus_uuid(fake_nvml, monkeypatch):
    from paddlike.launch.context.devices import nvml_gpus

    monkeypatch.setenv("FAKE_NVML_GPUS", "3")
    found = nvml_gpus(f"{fake_nvml}/libnvidia-ml.so.1")
    assert (found.count, found.source) == (3, "NVML")
    assert found.uuids == tuple(f"GPU-0000000{i}-1111-2222-3333-444444444444" for i in range(3))


@pytest.mark.parametrize("given", [2, 0])
def test_nvml_is_preferred_to_proc_which_may_list_the_hosts_gpus(
    fake_nvml, tmp_path, monkeypatch, given
):
    monkeypatch.setenv("FAKE_NVML_GPUS", str(given))  # what the container was given
    for i in range(8):
        (tmp_path / f"0000:0{i}:00.0").mkdir()
    ctl = tmp_path / "nvidiactl"
    ctl.touch()
    found = probe_gpus({}, gpus_dir=str(tmp_path), nvidia_ctl=str(ctl),
                       library=f"{fake_nvml}/libnvidia-ml.so.1")  # fmt: skip
    assert found.count == given
    assert found.source == ("NVML" if given else "")


def test_the_launcher_maps_uuid_entries_of_cuda_visible_devices_through_nvml(fake_nvml, tmp_path):
    (tmp_path / "t.py").write_text("")
    uuid = "GPU-0000000{}-1111-2222-3333-444444444444".format
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "CUDA_"))}
    env.update(LD_LIBRARY_PATH=fake_nvml, FAKE_NVML_GPUS="4", PADDLIKE_GPU_PROBE="nvml",
               CUDA_VISIBLE_DEVICES=f"{uuid(3)},GPU-00000001")  # fmt: skip
    argv = [sys.executable, "-m", "paddlike.launch", "--dry_run", "t.py"]
    run = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "devices: 4 GPUs found by NVML, CUDA_VISIBLE_DEVICES=" in run.stdout
    assert "local index 0, device gpu 0 (physical 3)," in run.stdout
    assert "local index 1, device gpu 1," in run.stdout  # GPU-00000001 is GPU 1


def test_the_description_lists_each_workers_gpus_unless_worker_i_has_gpu_i():
    assert assign(proc(2)).describe() == f"2 GPUs found by {NVIDIA_GPUS_DIR}: one worker per GPU"
    assert assign(proc(4), "2,3").describe().endswith(
        "; worker 0: gpu 0 (physical 2), worker 1: gpu 1 (physical 3)"
    )
    assert assign(proc(4), nproc=2).describe().endswith(
        "slices of 2; worker 0: gpu 0,1, worker 1: gpu 2,3"
    )
    assert assign(NONE).describe() == assign(NONE).why
