"""DeepSpeed's hostfile: ``host slots=N`` a line, ``#`` comments; mistakes name the line."""

from __future__ import annotations

import pytest

from paddlike.launch.cluster.hostfile import Host, parse_hostfile, read_hostfile
from paddlike.launch.context.options import UsageError


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("worker-0 slots=4\nworker-1 slots=4\n", (Host("worker-0", 4), Host("worker-1", 4))),
        ("# the cluster\n\nh0 slots=2  # fast\n  h1\n", (Host("h0", 2), Host("h1", None))),
        ("h0 slots=1\nh1 slots=8\n", (Host("h0", 1), Host("h1", 8))),
        ("10.0.0.2\t slots=2", (Host("10.0.0.2", 2),)),
    ],
)
def test_a_hostfile_lists_hosts_in_its_order_with_their_slots(text, hosts) -> None:
    assert parse_hostfile(text) == hosts


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("h0 slots=0\n", "--hostfile: hf line 1: slots must be a positive integer, got '0'"),
        ("h0 slots=two\n", "--hostfile: hf line 1: slots must be a positive integer, got 'two'"),
        ("h0 slots=2\n# x\nh0 slots=2\n", "host 'h0' is listed twice (first on line 1)"),
        (
            "h0 gpus=2\n",
            "--hostfile: hf line 1: expected 'host' or 'host slots=N', got 'h0 gpus=2'",
        ),
        ("localhost slot=2\n", "got 'localhost slot=2' (did you mean 'slots=2'"),
        ("h0 Slots=4\n", "got 'h0 Slots=4' (did you mean 'slots=4'"),
        ("h0 slots=1 slots=2\n", "slots= given twice"),
        ("# nothing\n\n", "--hostfile: hf lists no host"),
        ("-oProxyCommand=x\n", "hf line 1: host '-oProxyCommand=x' starts with '-' (ssh would"),
    ],
)
def test_a_hostfile_mistake_names_the_file_and_the_line(text, message) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_hostfile(text, "hf")


def test_a_hostfile_that_cannot_be_read_is_a_usage_error(tmp_path) -> None:
    with pytest.raises(UsageError, match=r"--hostfile: cannot read '.*/missing' \(No such file"):
        read_hostfile(str(tmp_path / "missing"))


def test_horovods_host_colon_slots_gets_the_hostfile_spelling() -> None:
    with pytest.raises(UsageError) as err:
        parse_hostfile("tc0:2\n", "hf")
    assert str(err.value) == (
        "--hostfile: hf line 1: expected 'host slots=N' (DeepSpeed's format), got 'tc0:2': "
        "Horovod's tc0:2 is written 'tc0 slots=2' here"
    )
    assert parse_hostfile("fd00::2 slots=1\n")[0].name == "fd00::2"  # IPv6 stays a name


# DeepSpeed's tests/unit/launcher/test_run.py (test_hostfile_good / test_hostfiles_bad),
# translated; "missingslots" is a host with its own default here (slots= may be left out)
DS_GOOD = """
    worker-1 slots=2
    worker-2 slots=2

    localhost slots=1
    123.23.12.10 slots=2

    #worker-1 slots=3
    # this is a comment

    """


def test_deepspeeds_good_hostfile() -> None:
    assert parse_hostfile(DS_GOOD) == (
        Host("worker-1", 2), Host("worker-2", 2), Host("localhost", 1), Host("123.23.12.10", 2),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("worker-1 slots=2\nworker-2 slots=1\nworker-1 slots=1\n", "'worker-1' is listed twice"),
        ("this is bad slots=1\n", "expected 'host' or 'host slots=N'"),
        ("\n    \n", "lists no host"),
        ("worker-1 slots=2\nthis is bad slots=1\nworker-2 slots=4\n", "line 2: expected"),
    ],
)
def test_deepspeeds_bad_hostfiles(text, message) -> None:
    with pytest.raises(UsageError, match=message):
        parse_hostfile(text, "hf")
