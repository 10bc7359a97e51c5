"""GPU health read through ctypes from a stand-in NVML library (no GPU where the suite
runs; the stand-in is the only fake): the readings, and a one-node job whose check finds
an uncorrectable ECC error and thermal throttling, exits 2 and starts no worker."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from paddlike.launch.health.nvml import GpuReading, NvmlSource

# NVML's signatures (nvml.h); each reading from a variable "index:value,index:value"
STAND_IN = r"""
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
static char devices[64];
static unsigned count(void) { const char *c = getenv("FAKE_NVML_GPUS"); return c ? atoi(c) : 0; }
static unsigned long long value(const char *var, int gpu) {
    const char *v = getenv(var);
    char key[16];
    if (!v) return 0;
    snprintf(key, sizeof key, "%d:", gpu);
    for (const char *p = v; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, key, strlen(key)) == 0) return strtoull(p + strlen(key), NULL, 0);
    return 0;
}
int nvmlInit_v2(void) { return 0; }
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned *n) { *n = count(); return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, char **h) {
    if (i >= count()) return 2;
    *h = &devices[i];
    return 0;
}
int nvmlDeviceGetUUID(char *h, char *buf, unsigned len) {
    snprintf(buf, len, "GPU-%08d", (int)(h - devices));
    return 0;
}
int nvmlDeviceGetTotalEccErrors(char *h, int type, int counter, unsigned long long *n) {
    if (type != 1 || counter != 0) return 2;  /* uncorrected, volatile: what is asked */
    *n = value("FAKE_NVML_ECC", (int)(h - devices));
    return 0;
}
int nvmlDeviceGetRetiredPagesPendingStatus(char *h, int *pending) {
    *pending = (int)value("FAKE_NVML_RETIRED", (int)(h - devices));
    return 0;
}
/* no nvmlDeviceGetRemappedRows: an older driver; its readings are None */
int nvmlDeviceGetCurrentClocksThrottleReasons(char *h, unsigned long long *reasons) {
    *reasons = value("FAKE_NVML_THROTTLE", (int)(h - devices));
    return 0;
}
"""


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory) -> str:
    """A directory holding libnvidia-ml.so.1, built from `STAND_IN`."""
    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler (cc) to build a stand-in NVML library")
    d = tmp_path_factory.mktemp("nvml")
    (d / "nvml.c").write_text(STAND_IN)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(d / "libnvidia-ml.so.1"),
                    str(d / "nvml.c")], check=True, capture_output=True, timeout=60)  # fmt: skip
    return str(d)


def test_each_gpus_health_is_read_through_ctypes(stand_in, monkeypatch):
    monkeypatch.setenv("FAKE_NVML_GPUS", "3")
    monkeypatch.setenv("FAKE_NVML_ECC", "1:2")
    monkeypatch.setenv("FAKE_NVML_RETIRED", "2:1")
    monkeypatch.setenv("FAKE_NVML_THROTTLE", "0:0x1,2:0x48")
    readings = NvmlSource(f"{stand_in}/libnvidia-ml.so.1").read()
    assert readings == [
        GpuReading(0, "GPU-00000000", 0, False, None, None, 0x1),
        GpuReading(1, "GPU-00000001", 2, False, None, None, 0),
        GpuReading(2, "GPU-00000002", 0, True, None, None, 0x48),
    ]


def test_no_library_is_no_readings(tmp_path):
    assert NvmlSource(str(tmp_path / "libabsent.so.1")).read() is None


def test_a_node_with_a_sick_gpu_fails_its_check_and_starts_no_worker(stand_in, tmp_path):
    (tmp_path / "t.py").write_text("print('worker ran')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLIKE_", "CUDA_"))}
    env.update(LD_LIBRARY_PATH=stand_in, PADDLIKE_GPU_PROBE="nvml", FAKE_NVML_GPUS="2",
               FAKE_NVML_ECC="1:1", FAKE_NVML_THROTTLE="0:0x40")  # fmt: skip
    argv = [sys.executable, "-m", "paddlike.launch", "--preflight", "on", "--devices", "cpu",
            "--log_dir", "log", "t.py"]  # fmt: skip
    run = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert "pre-flight check: node 0 (127.0.0.1): GPU 1: 1 uncorrectable ECC error\n" in run.stderr
    assert "pre-flight check: node 0 (127.0.0.1): GPU 0: hardware thermal slowdown" in run.stderr
    assert "worker ran" not in run.stdout
    assert not list((tmp_path / "log").glob("workerlog.*"))
    preflight = json.loads((tmp_path / "log" / "summary.json").read_text())["preflight"]
    assert preflight["nodes"][0]["gpus"] == 2
    assert preflight["bad_nodes"] == [0]
