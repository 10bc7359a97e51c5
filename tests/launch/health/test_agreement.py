"""Nodes given other pre-flight settings disagree at the rendezvous, before anything
starts, like any other option they must share (issue 35, the user trial's first point)."""

from __future__ import annotations

import pytest

from paddlike.launch.context.devices import DeviceAssignment
from paddlike.launch.context.nodematch import NodeMatch
from paddlike.launch.context.options import parse_options
from paddlike.launch.health.limits import agreed_settings
from paddlike.launch.plan.agreement import check_fingerprints
from paddlike.launch.specs import collective_job, ps_counts_job

HOSTS = ("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4")
CPUS = DeviceAssignment("cpu", ((), ()))


def entries(argvs, environs=None):
    """Every node's rendezvous entry, node i started with argvs[i] and environs[i]."""
    environs = environs or [{} for _ in argvs]
    out = []
    for i, (argv, environ) in enumerate(zip(argvs, environs, strict=True)):
        options = parse_options(["--ips", ",".join(HOSTS), *argv, "train.py"], environ)
        job = collective_job(options, NodeMatch(HOSTS, HOSTS, i, "eth0", "matched"), CPUS)
        out.append(job.entry((1, 2, 3), hostname=f"n{i}", pid=i, job_id="g"))
    return out


def test_limits_set_in_one_nodes_environment_name_that_node_and_both_values():
    environs = [{}, {"PADDLIKE_PREFLIGHT_LIMITS": "bandwidth=0.3"}, {}, {}]
    message = check_fingerprints(entries([[]] * 4, environs))
    assert message == (
        "rendezvous: node 1 (n1, 10.0.0.2) disagrees on preflight_limits: it has "
        "'bandwidth=0.3', node 0 (n0, 10.0.0.1) has 'the defaults'; run the same command "
        "on every node"
    )


def test_another_preflight_mode_on_one_node_is_named():
    argvs = [[], [], ["--preflight", "full"], []]
    message = check_fingerprints(entries(argvs))
    assert message is not None
    assert "node 2 (n2, 10.0.0.3) disagrees on preflight: it has 'full'" in message


def test_the_same_check_spelled_differently_agrees():
    argvs = [[], ["--preflight", "on"], ["--preflight_limits", "rtt=4,bandwidth=0.5"], []]
    assert check_fingerprints(entries(argvs)) is None


def test_ps_counts_nodes_must_agree_on_the_check_too():
    hosts = HOSTS[:2]
    entries_ = []
    for i, argv in enumerate(([], ["--preflight", "off"])):
        options = parse_options(["--ips", ",".join(hosts), "--server_num", "1", *argv, "t.py"], {})
        job = ps_counts_job(options, NodeMatch(hosts, hosts, i, "eth0", "matched"))
        entries_.append(job.entry(tuple(range(job.reserve)), hostname=f"n{i}", pid=i, job_id="g"))
    message = check_fingerprints(entries_)
    assert message is not None and "disagrees on preflight: it has 'off'" in message


@pytest.mark.parametrize(
    ("preflight", "pairs", "expected"),
    [
        (None, (), {"preflight": "on", "preflight_limits": "the defaults"}),
        ("on", (("rtt", 4.0),), {"preflight": "on", "preflight_limits": "the defaults"}),
        ("full", (("rtt", 8.0),), {"preflight": "full", "preflight_limits": "rtt=8"}),
        ("on", (("rtt_floor_ms", 2.0),), {"preflight": "on", "preflight_limits": "rtt_floor_ms=2"}),
        ("off", (("rtt", 8.0),), {"preflight": "off"}),
    ],
)
def test_agreed_settings(preflight, pairs, expected):
    assert agreed_settings(preflight, pairs) == expected
