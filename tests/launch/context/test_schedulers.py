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


# What Slurm 22.05's slurmd set in the tests' real cluster (tests/e2e/slurm/): a step of
# `srun -N2 -n2` inside `sbatch -N3`, and the batch script's own shell.
_STEP_OF_TWO_IN_THREE = {
    "SLURM_JOB_ID": "1",
    "SLURM_JOB_NODELIST": "sn[0-2]",
    "SLURM_JOB_NUM_NODES": "3",
    "SLURM_NODELIST": "sn[0-2]",
    "SLURM_NNODES": "2",
    "SLURM_NODEID": "1",
    "SLURM_STEP_ID": "0",
    "SLURM_STEPID": "0",
    "SLURM_STEP_NODELIST": "sn[0-1]",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_NTASKS": "2",
}
_BATCH_SHELL = {
    "SLURM_JOB_ID": "1",
    "SLURM_JOB_NODELIST": "sn[0-2]",
    "SLURM_NODELIST": "sn[0-2]",
    "SLURM_NNODES": "3",
    "SLURM_NODEID": "0",
}


def test_an_srun_step_on_part_of_the_allocation_is_the_step_s_nodes():
    info = detect_scheduler(_STEP_OF_TWO_IN_THREE)
    assert info is not None
    assert (info.hosts, info.node_index, info.source) == (("sn0", "sn1"), 1, "SLURM_STEP_NODELIST")


def test_the_batch_script_s_own_shell_is_not_a_multi_node_launch():
    assert detect_scheduler(_BATCH_SHELL) is None


def test_two_tasks_on_one_node_is_an_error_naming_the_variable():
    env = {**_STEP_OF_TWO_IN_THREE, "SLURM_STEP_NUM_TASKS": "4", "SLURM_NTASKS": "4"}
    with pytest.raises(
        UsageError, match=r"^SLURM_STEP_NUM_TASKS: 4 tasks on the 2 nodes of SLURM_STEP_NODELIST"
    ):
        detect_scheduler(env)


def test_step_node_count_that_contradicts_the_step_list_is_an_error():
    env = {**_STEP_OF_TWO_IN_THREE, "SLURM_STEP_NUM_NODES": "3"}
    with pytest.raises(UsageError, match=r"^SLURM_STEP_NUM_NODES: 3 contradicts"):
        detect_scheduler(env)
