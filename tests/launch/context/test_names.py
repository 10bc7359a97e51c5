"""Names that resolve late: every missing name is retried until the deadline, and one
that never resolves is named there, with the exit code of a rendezvous timeout.

A fake resolver answers only from its k-th try on, and a fake clock moves only when the
wait sleeps: the cases count tries, nothing waits for real and no DNS server is asked.
"""

from __future__ import annotations

import socket

import pytest

from paddlike.launch.context.names import (
    MAX_DELAY,
    NamesUnresolved,
    NameWait,
    check_one_family,
    resolve_names,
)
from paddlike.launch.context.options import UsageError


class LateNames:
    """Each name resolves from its `after[name]`-th try on (never when absent)."""

    def __init__(self, table: dict[str, str], after: dict[str, int]):
        self.table, self.after = dict(table), after
        self.tries: dict[str, int] = {}

    def __call__(self, name: str) -> str:
        self.tries[name] = self.tries.get(name, 0) + 1
        if name in self.table and self.tries[name] >= self.after.get(name, 1):
            return self.table[name]
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.shown: list[str] = []
        self.done = 0

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def wait(self, timeout: float) -> NameWait:
        def show(what: str, elapsed: float, timeout: float) -> None:
            self.shown.append(what)

        def done() -> None:
            self.done += 1

        return NameWait(timeout, show, lambda: self.now, self.sleep, done)


TABLE = {"node-0": "198.18.0.1", "node-1": "198.18.0.2", "node-2": "198.18.0.3"}


def test_names_that_resolve_after_a_few_tries_are_waited_for():
    resolve = LateNames(TABLE, {"node-1": 3, "node-2": 5})
    clock = FakeTime()
    found = resolve_names(dict.fromkeys(TABLE, "--ips"), resolve, clock.wait(300))
    assert found == TABLE
    assert resolve.tries == {"node-0": 1, "node-1": 3, "node-2": 5}
    assert len(clock.sleeps) == 4 and clock.sleeps == sorted(clock.sleeps)  # backing off
    assert (
        clock.shown[0] == "waiting for names to resolve, still missing: --ips: 'node-1', 'node-2'"
    )
    assert clock.shown[-1] == "waiting for names to resolve, still missing: --ips: 'node-2'"
    assert clock.done == 1  # the progress line is erased once


def test_a_name_that_never_resolves_is_named_at_the_deadline_with_the_rendezvous_exit_code():
    resolve = LateNames(TABLE, {})
    del resolve.table["node-2"]
    clock = FakeTime()
    names = {**dict.fromkeys(TABLE, "--ips"), "meet": "--master_addr"}
    with pytest.raises(NamesUnresolved) as err:
        resolve_names(names, resolve, clock.wait(30))
    assert str(err.value) == (
        "--ips: 'node-2'; --master_addr: 'meet' still do not resolve after 30 s "
        "(--rdzv_timeout): Name or service not known"
    )
    assert err.value.exit_code == 1  # as RendezvousTimeout's
    assert clock.now == pytest.approx(30)  # the last sleep ends at the deadline, not past it
    assert max(clock.sleeps) == MAX_DELAY
    assert clock.done == 1


def test_without_a_wait_a_name_that_does_not_resolve_is_a_usage_error_at_once():
    with pytest.raises(UsageError, match=r"^--ips: 'node-9' does not resolve \(Name or") as err:
        resolve_names({"node-9": "--ips"}, LateNames(TABLE, {}), None)
    assert err.value.exit_code == 2


def test_enough_ends_the_wait_with_a_name_still_missing():
    resolve = LateNames(TABLE, {"node-2": 10**6})
    clock = FakeTime()
    found = resolve_names(
        dict.fromkeys(TABLE, "--ips"), resolve, clock.wait(300), enough=lambda f: len(f) == 2
    )
    assert found == {"node-0": "198.18.0.1", "node-1": "198.18.0.2"}
    assert clock.sleeps == []


def test_one_job_is_all_ipv4_or_all_ipv6():
    check_one_family(["a", "b"], ["fd00::1", "fd00::2"], "--ips")
    with pytest.raises(
        UsageError,
        match=r"^--ips: mixes IPv4 entries \(a \(198.18.0.1\)\) and "
        r"IPv6 entries \(fd00::2\)",
    ):
        check_one_family(["a", "fd00::2"], ["198.18.0.1", "fd00::2"], "--ips")
