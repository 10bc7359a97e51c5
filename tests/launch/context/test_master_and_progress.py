"""Where the launchers meet (a scheduler's PADDLE_MASTER against the options), and the
line a launcher shows while it waits for the other nodes."""

from __future__ import annotations

import io

import pytest

from paddlike.launch.console.output import Console
from paddlike.launch.console.progress import ProgressLine
from paddlike.launch.context.master import launchers_master
from paddlike.launch.context.options import UsageError, parse_options

HOSTS = ("10.0.0.1", "10.0.0.2")


def _options(*argv: str):  # type: ignore[no-untyped-def]
    return parse_options([*argv, "train.py"], {})


@pytest.mark.parametrize(
    ("argv", "scheduler_master", "expected"),
    [
        ((), None, ("10.0.0.1", 6170)),
        ((), "10.0.0.5:7000", ("10.0.0.5", 7000)),
        # --master_port is the workers' port: the launchers stay at PADDLE_MASTER
        (("--master_port", "7100"), "10.0.0.5:7000", ("10.0.0.5", 7000)),
        (("--master_addr", "10.0.0.5"), "10.0.0.5:7000", ("10.0.0.5", 7000)),
        (("--master", "10.0.0.5:7000"), "10.0.0.5:7000", ("10.0.0.5", 7000)),
        (("--master", "etcd://10.0.0.9:2379"), "10.0.0.5:7000", ("10.0.0.1", 6170)),
    ],
)
def test_the_launchers_meet_at_the_schedulers_paddle_master_unless_told_otherwise(
    argv, scheduler_master, expected
):
    assert launchers_master(_options(*argv), HOSTS, scheduler_master) == expected


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (("--master", "10.0.0.6:7000"), "--master"),
        (("--master_addr", "10.0.0.6"), "--master_addr"),
    ],
)
def test_an_option_that_contradicts_paddle_master_is_a_usage_error(argv, option):
    with pytest.raises(UsageError, match=rf"^{option}: .* contradicts PADDLE_MASTER=10.0.0.5:7000"):
        launchers_master(_options(*argv), HOSTS, "10.0.0.5:7000")


def test_a_master_port_that_is_paddle_masters_port_is_a_usage_error():
    with pytest.raises(UsageError, match=r"^--master_port: 7000 is the workers' port on node 0"):
        launchers_master(_options("--master_port", "7000"), HOSTS, "10.0.0.5:7000")


def test_a_paddle_master_without_a_port_is_a_usage_error():
    with pytest.raises(UsageError, match=r"^PADDLE_MASTER: expected ip:port, got '10.0.0.5'"):
        launchers_master(_options(), HOSTS, "10.0.0.5")


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_waiting_line_off_a_terminal_repeats_only_every_few_seconds_or_on_change():
    out, clock = io.StringIO(), _Clock()
    line = ProgressLine(out, tty=False, every=5.0, clock=clock)
    for t in range(1, 8):
        clock.now = float(t)
        line.show("waiting for node 0 (10.0.0.1:6170) to host the launchers' store", t, 300)
    clock.now = 8.0
    line.show("waiting for node 2 (10.0.0.3)", 8, 300)
    assert out.getvalue().splitlines() == [
        "paddlike.launch: waiting for node 0 (10.0.0.1:6170) to host the launchers' store "
        "(1 s of 300 s)",
        "paddlike.launch: waiting for node 0 (10.0.0.1:6170) to host the launchers' store "
        "(6 s of 300 s)",
        "paddlike.launch: waiting for node 2 (10.0.0.3) (8 s of 300 s)",
    ]


def test_the_waiting_line_on_a_terminal_is_rewritten_in_place_and_erased_before_other_output():
    out = io.StringIO()
    line = ProgressLine(out, tty=True)
    line.show("waiting for node 1 (10.0.0.2)", 1, 300)
    line.show("waiting for node 1 (10.0.0.2)", 2, 300)
    console = Console(err=out)
    line.attach(console)
    console.say("rendezvous with 2 nodes took 2.10 s")
    assert out.getvalue() == (
        "\rpaddlike.launch: waiting for node 1 (10.0.0.2) (1 s of 300 s)\x1b[K"
        "\rpaddlike.launch: waiting for node 1 (10.0.0.2) (2 s of 300 s)\x1b[K"
        "\r\x1b[K"
        "paddlike.launch: rendezvous with 2 nodes took 2.10 s\n"
    )
