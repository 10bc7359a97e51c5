"""Scheduler environments: Slurm and PaddleCloud / Kubeflow fill in the node list."""

from __future__ import annotations

import pytest

from paddlike.launch.context.options import UsageError
from paddlike.launch.context.schedulers import detect_scheduler, expand_slurm_nodelist


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("node1", ("node1",)),
        ("node[1-3]", ("node1", "node2", "node3")),
        ("node[01-03,07]", ("node01", "node02", "node03", "node07")),
        ("gpu[8-10]", ("gpu8", "gpu9", "gpu10")),
        ("a[1-2],b5,c[3]", ("a1", "a2", "b5", "c3")),
        ("rack[1-2]-n[1-2]", ("rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2")),
        ("x[098-101]", ("x098", "x099", "x100", "x101")),
    ],
)
def test_slurm_nodelists_expand(text, hosts):
    assert expand_slurm_nodelist(text) == hosts


@pytest.mark.parametrize("text", ["node[1-", "node]1", "node[3-1]", "node[a-b]", ""])
def test_malformed_slurm_nodelists_are_rejected(text):
    with pytest.raises(ValueError):
        expand_slurm_nodelist(text)


def test_slurm_environment():
    info = detect_scheduler(
        {"SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_NODEID": "1", "SLURM_NNODES": "2"}
    )
    assert info is not None
    assert (info.name, info.hosts, info.node_index) == ("slurm", ("gpu01", "gpu02"), 1)


def test_slurm_without_a_node_id_is_not_a_launch_context():
    assert detect_scheduler({"SLURM_JOB_NODELIST": "gpu[01-02]"}) is None


def test_slurm_nnodes_that_contradicts_the_list_is_an_error():
    env = {"SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_NODEID": "0", "SLURM_NNODES": "3"}
    with pytest.raises(UsageError, match=r"^SLURM_NNODES: 3 contradicts SLURM_JOB_NODELIST"):
        detect_scheduler(env)


def test_slurm_node_id_out_of_range_is_an_error():
    env = {"SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_NODEID": "2"}
    with pytest.raises(UsageError, match=r"^SLURM_NODEID: 2 is out of range"):
        detect_scheduler(env)


def test_bad_slurm_nodelist_names_the_variable():
    with pytest.raises(UsageError, match=r"^SLURM_JOB_NODELIST: not a Slurm node list"):
        detect_scheduler({"SLURM_JOB_NODELIST": "gpu[01-", "SLURM_NODEID": "0"})


def test_paddlecloud_environment():
    info = detect_scheduler(
        {
            "PADDLE_TRAINERS": "10.0.0.1,10.0.0.2",
            "PADDLE_TRAINER_ID": "1",
            "POD_IP": "10.0.0.2",
            "PADDLE_NNODES": "2",
            "PADDLE_MASTER": "10.0.0.1:6170",
        }
    )
    assert info is not None
    assert info.name == "paddlecloud"
    assert (info.hosts, info.node_index, info.host) == (("10.0.0.1", "10.0.0.2"), 1, "10.0.0.2")
    assert info.master == "10.0.0.1:6170"


def test_paddlecloud_nnodes_contradiction_is_an_error():
    with pytest.raises(UsageError, match=r"^PADDLE_NNODES: 3 contradicts PADDLE_TRAINERS"):
        detect_scheduler({"PADDLE_TRAINERS": "a,b", "PADDLE_NNODES": "3"})


def test_paddlecloud_bad_trainer_id_is_an_error():
    with pytest.raises(UsageError, match=r"^PADDLE_TRAINER_ID: expected an integer >= 0, got 'x'"):
        detect_scheduler({"PADDLE_TRAINERS": "a,b", "PADDLE_TRAINER_ID": "x"})


def test_no_scheduler():
    assert detect_scheduler({"PATH": "/bin"}) is None
