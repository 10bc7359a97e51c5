"""The node's own check: its facts judged against the limits, and GPU health through a
stand-in NVML (no GPU where the suite runs: the only fake)."""

from __future__ import annotations

import pytest

from paddlike.launch.context.options.values import preflight_limits as parse_limits
from paddlike.launch.health.limits import Limits
from paddlike.launch.health.node import NodeFacts, node_problems, read_facts
from paddlike.launch.health.nvml import GpuReading, gpu_faults


class StandInNvml:
    """A `GpuSource` reporting given readings, as NVML would on a GPU node."""

    def __init__(self, readings):
        self.readings = readings

    def read(self):
        return self.readings


HEALTHY = [GpuReading(i, f"GPU-{i}", 0, False, False, False, 0x1) for i in range(4)]  # idle


def test_healthy_gpus_have_no_faults():
    assert gpu_faults(HEALTHY) == []


def test_ecc_errors_pending_pages_and_throttling_are_faults_naming_the_gpu():
    sick = list(HEALTHY)
    sick[1] = sick[1]._replace(ecc_uncorrectable=2)
    sick[2] = sick[2]._replace(throttle=0x8 | 0x40, retired_pending=True)
    sick[3] = sick[3]._replace(remap_pending=True, remap_failed=True)
    assert gpu_faults(sick) == [
        "GPU 1: 2 uncorrectable ECC errors",
        "GPU 2: retired pages pending (the GPU needs a reset)",
        "GPU 2: hardware slowdown, hardware thermal slowdown",
        "GPU 3: row remapping pending (the GPU needs a reset)",
        "GPU 3: row remapping failed",
    ]


def test_unsupported_readings_are_not_faults():
    assert gpu_faults([GpuReading(0)]) == []


def test_the_node_check_reads_the_stand_in_nvml_and_the_real_disk_and_memory(tmp_path):
    sick = [HEALTHY[0], HEALTHY[1]._replace(throttle=0x20)]
    facts = read_facts(str(tmp_path), "lo", StandInNvml(sick))
    assert facts.gpus == 2
    assert facts.gpu_faults == ("GPU 1: software thermal slowdown",)
    assert facts.disk_free and facts.memory_available
    assert facts.interface_state == "unknown"  # lo: up, without a carrier to report
    problems = node_problems(facts, Limits(disk=0, memory=0), str(tmp_path), "lo")
    assert problems == ["GPU 1: software thermal slowdown"]


def test_no_nvml_means_no_gpu_figures(tmp_path):
    facts = read_facts(str(tmp_path), "lo", StandInNvml(None))
    assert (facts.gpus, facts.gpu_faults) == (None, ())


def test_little_disk_or_memory_and_a_down_interface_are_named():
    facts = NodeFacts(int(0.2e9), int(0.1e9), "down", None)
    assert node_problems(facts, Limits(), "/scratch/log", "eth0") == [
        "0.20 GB free in /scratch/log (needs 1.00 GB: --preflight_limits disk_gb)",
        "0.10 GB of memory available (needs 0.50 GB: --preflight_limits memory_gb)",
        "the job's interface eth0 is down",
    ]


def test_limits_parse_and_scale():
    pairs = parse_limits("bandwidth=0.3, rtt=8,rtt_floor_ms=2,disk_gb=5,memory_gb=1")
    assert Limits.of(pairs) == Limits(0.3, 8.0, 0.002, 5e9, 1e9, 2)
    assert Limits.of(()) == Limits()


@pytest.mark.parametrize(
    ("text", "message"),
    [("speed=3", "expected name=value pairs with names bandwidth, rtt"),
     ("bandwidth", "expected name=value pairs"),
     ("rtt=fast", "expected a number for rtt"),
     ("bandwidth=2", "at most 1"),
     ("rtt=0.5", "at least 1"),
     ("disk_gb=-1", "expected a finite number >= 0 for disk_gb"),
     ("rtt=4,bandwidth=0.3,rtt=8", "^rtt is given twice; give each name once$"),
     ("quarantine_rounds=1.5", "^expected a whole number of rounds for quarantine_rounds$"),
     ("bandwidth=0.3 rtt=8", "^expected a number for bandwidth; separate the pairs with commas$")],
)  # fmt: skip
def test_bad_limits_say_what_was_expected(text, message):
    with pytest.raises(ValueError, match=message):
        parse_limits(text)


def test_a_bad_limit_on_the_command_line_is_one_line_and_exit_2(tmp_path):
    import subprocess
    import sys

    (tmp_path / "t.py").write_text("")
    argv = [sys.executable, "-m", "paddlike.launch", "--preflight_limits", "speed=3",
            "--dry_run", "t.py"]  # fmt: skip
    run = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert run.stderr.startswith("paddlike.launch: error: --preflight_limits: expected name=value")
    run = subprocess.run([*argv[:3], "--preflight", "maybe", "--dry_run", "t.py"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert run.returncode == 2
    assert "--preflight: expected off, on or full, got 'maybe'" in run.stderr


def test_the_options_names_are_the_limits_names():
    from paddlike.launch.context.options.values import PREFLIGHT_LIMITS
    from paddlike.launch.health import limits

    assert tuple(limits._NAMES) == PREFLIGHT_LIMITS
