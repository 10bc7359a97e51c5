"""Which one-host hostfiles run here without ssh (DeepSpeed's one-host start)."""

from __future__ import annotations

import pytest

from paddlike.launch.cluster.here import is_this_machine, run_here
from paddlike.launch.context.options import parse_options


@pytest.mark.parametrize(
    ("name", "here"),
    [
        ("localhost", True),
        ("127.0.0.1", True),
        ("127.0.1.1", True),
        ("::1", True),
        ("gpu-07", True),  # this machine's hostname
        ("gpu-07.cluster.example", True),  # its full name
        ("gpu-08", False),
        ("198.18.0.2", False),
    ],
)
def test_this_machine_is_localhost_a_loopback_address_or_its_hostname(name, here) -> None:
    assert is_this_machine(name, "gpu-07.cluster.example") is here


def _here(tmp_path, hostfile: str, *args: str):
    (tmp_path / "hf").write_text(hostfile)
    argv = ["--hostfile", str(tmp_path / "hf"), *args, "train.py"]
    return run_here(parse_options(argv, {}), argv, hostname="gpu-07")


def test_one_host_of_this_machine_becomes_this_launchers_own_options(tmp_path) -> None:
    options, note = _here(tmp_path, "gpu-07 slots=3\n")
    assert (options.hostfile, options.slots, options.gpus) == (None, 3, None)
    assert "its one host, gpu-07, is this machine: the job runs here, without ssh" in note
    options, _ = _here(tmp_path, "localhost slots=8\n", "-i", "localhost:2,5")
    assert (options.slots, options.gpus, options.include) == (None, ("2", "5"), None)
    options, _ = _here(tmp_path, "a slots=2\nlocalhost slots=8\n", "-e", "a")
    assert options.slots == 8  # one host left after the filters


@pytest.mark.parametrize(
    ("hostfile", "args"),
    [
        ("localhost slots=2\n", ("--force_multi",)),
        ("localhost slots=2\n", ("--launcher", "slurm")),
        ("gpu-08 slots=2\n", ()),  # another machine: over ssh
        ("localhost slots=2\ngpu-08 slots=2\n", ()),
    ],
)
def test_the_others_go_to_their_hosts(tmp_path, hostfile, args) -> None:
    assert _here(tmp_path, hostfile, *args) is None


def test_no_ssh_makes_this_host_node_i_of_the_hostfiles_hosts(tmp_path) -> None:
    (tmp_path / "hf").write_text("h0 slots=1\nh1 slots=3\nh2\n")
    argv = ["--hostfile", str(tmp_path / "hf"), "--no_ssh", "--node_rank", "1", "-e", "h0",
            "--job_id", "J", "--max_restarts", "2", "train.py", "--lr", "1"]  # fmt: skip
    options, note = run_here(parse_options(argv, {}), argv, environ={})
    assert (options.ips, options.node_rank, options.slots) == (("h1", "h2"), 1, None)
    assert (options.job_id, options.max_restarts, options.hostfile) == ("J", 2, None)
    assert options.training_script_args == ("--lr", "1")
    assert "this host runs node 1 (h2) of 2" in note
    argv[argv.index("-e") : argv.index("-e") + 2] = []
    options, _ = run_here(parse_options(argv, {}), argv, environ={})
    assert (options.ips, options.node_rank, options.slots) == (("h0", "h1", "h2"), 1, 3)


@pytest.mark.parametrize(("extra", "passed"), [((), True), (("--no_local_rank",), False)])
def test_a_hostfile_run_here_keeps_deepspeeds_local_rank_argument(tmp_path, extra, passed):
    """The options that made the start DeepSpeed-style are gone from this launcher's own
    (no --hostfile, no filters): whether its workers get --local_rank=N stays."""
    options, _ = _here(tmp_path, "localhost slots=2\n", "-i", "localhost:0,1", *extra)
    assert (options.hostfile, options.include, options.pass_local_rank) == (None, None, passed)
    (tmp_path / "hf").write_text("h0 slots=1\nh1 slots=3\n")
    argv = ["--hostfile", str(tmp_path / "hf"), "--no_ssh", "--node_rank", "1", *extra,
            "train.py"]  # fmt: skip
    options, _ = run_here(parse_options(argv, {}), argv, environ={})
    assert (options.node_rank, options.pass_local_rank) == (1, passed)
