"""The options of "one command for the cluster": their spellings, values and mistakes."""

from __future__ import annotations

import pytest

from paddlike.launch.context.options import UsageError, parse_options
from paddlike.launch.context.options.parser import build_parser


@pytest.mark.parametrize(
    ("argv", "fields"),
    [
        (["--hostfile", "hf"], {"hostfile": "hf", "launcher": None}),
        (["-H", "hf", "-i", "a:0@b"], {"hostfile": "hf", "include": "a:0@b"}),
        (["-H", "hf", "-e", "b"], {"exclude": "b"}),
        (["-H", "hf", "--num_nodes", "2", "--num_gpus", "4"], {"num_nodes": 2, "num_gpus": 4}),
        (["--launcher", "PDSH", "-H", "hf"], {"launcher": "pdsh"}),
        (["--launcher", "slurm"], {"launcher": "slurm"}),
        (["-H", "hf", "--export", "NCCL_DEBUG, HF_HOME"], {"export": ("NCCL_DEBUG", "HF_HOME")}),
        (["-H", "hf", "--remote_python", "/opt/py"], {"remote_python": "/opt/py"}),
        (["-H", "hf", "--ssh_args=-p 2222 -F cfg"], {"ssh_args": "-p 2222 -F cfg"}),
        ([], {"hostfile": None, "launcher": None, "export": ()}),
    ],
)
def test_cluster_options_parse_to_their_fields(argv, fields) -> None:
    options = parse_options([*argv, "train.py"], {})
    assert {k: getattr(options, k) for k in fields} == fields


def test_cluster_options_come_from_the_environment_too() -> None:
    options = parse_options(["train.py"], {"PADDLIKE_HOSTFILE": "/etc/hf"})
    assert options.hostfile == "/etc/hf"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--launcher", "mpich"], "--launcher: MPI launchers start every rank themselves"),
        (["--launcher", "openmpi"], "use ssh, pdsh or slurm, got 'openmpi'"),
        (["--launcher", "rsh"], "--launcher: expected ssh, pdsh or slurm, got 'rsh'"),
        (["--export", "A-B"], "--export: expected variable names separated by commas"),
        (["--export", "TOK=abc"], r"NAME=VALUE: set it in this shell \(export TOK=\.\.\.\) "
         "and give --export TOK"),
        (["--num_gpus", "0"], "--num_gpus: expected a positive integer, got '0'"),
        (["--num_nodes", "x"], "--num_nodes: expected a positive integer, got 'x'"),
        (["--hostfile="], "--hostfile: expected a non-empty value"),
    ],
)
def test_bad_cluster_option_values_name_the_option_and_the_value(argv, message) -> None:
    with pytest.raises(UsageError, match=message):
        parse_options([*argv, "train.py"], {})


def test_help_lists_the_cluster_group_right_before_output() -> None:
    text = build_parser().format_help()
    assert "one command for the cluster:" in text
    assert text.index("one command for the cluster:") < text.index("\noutput:")
    for spelling in ("--hostfile, -H HOSTFILE", "--include, -i INCLUDE"):
        assert spelling in text


def test_ssh_args_given_with_a_space_may_start_with_an_option_of_ours() -> None:
    """``--ssh_args "-i KEY"``: "-i" is also --include's short form; the value is ssh's."""
    options = parse_options(["-H", "hf", "--ssh_args", "-i key -e none", "train.py"], {})
    assert options.ssh_args == "-i key -e none"
    assert options.include is None and options.exclude is None


def test_deepspeeds_launcher_args_points_at_ssh_args() -> None:
    with pytest.raises(UsageError, match=r"^--launcher_args: give ssh's .*--ssh_args="):
        parse_options(["-H", "hf", "--launcher_args", "-p 22", "train.py"], {})
