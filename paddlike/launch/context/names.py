"""Names that resolve late: wait for them, up to --rdzv_timeout, saying which are missing.

On Kubernetes a PaddleJob's or PyTorchJob's pods get their names (a headless service)
only once each pod is up, so a launcher that starts first sees names of its peers that
do not resolve yet: the normal start, not a typo. The node rules ask `resolve_names` for
every name at once; it retries the missing ones with a short back-off until they all
resolve, or until the caller says it has `enough` (this node's own entry, when other
facts name this node), or until the deadline, where it names the ones still missing.

The clock, the sleep and the progress line are injected (`NameWait`): the tests count
tries, not seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from paddlike import netaddr
from paddlike.launch import NamedTuple
from paddlike.launch.context.options.record import UsageError

FIRST_DELAY = 0.05  # seconds before the first retry; doubled each time up to MAX_DELAY
MAX_DELAY = 1.0


class NamesUnresolved(UsageError):
    """Names still unresolved at the deadline: ends the launcher like a rendezvous that
    timed out (the same exit code), one line naming them."""

    exit_code = 1


class NameWait(NamedTuple):
    """How long and how to wait for names (main: --rdzv_timeout and the progress line)."""

    timeout: float
    progress: Callable[[str, float, float], None] = lambda what, elapsed, timeout: None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    done: Callable[[], None] = lambda: None  # the wait is over: erase the progress line


def resolve_names(
    names: Mapping[str, str],
    resolve: Callable[[str], str],
    wait: NameWait | None,
    *,
    enough: Callable[[Mapping[str, str]], bool] | None = None,
) -> dict[str, str]:
    """name -> address for each of `names` (name -> the option it came from, for the
    messages). Without `wait`, one try: the first name that does not resolve is a
    UsageError (exit 2), as for a typo. With it, the missing names are tried again until
    all resolve or `enough(found)` is true; past `wait.timeout` `NamesUnresolved`, one
    line naming each missing name and its option."""
    if wait is None:
        return {n: _resolve_now(names[n], n, resolve) for n in names}
    try:
        return _wait_for(names, resolve, wait, enough)
    finally:
        wait.done()


def _wait_for(
    names: Mapping[str, str],
    resolve: Callable[[str], str],
    wait: NameWait,
    enough: Callable[[Mapping[str, str]], bool] | None,
) -> dict[str, str]:
    """The retry loop of `resolve_names`: back-off doubling to MAX_DELAY, no sleep past
    the deadline."""
    found: dict[str, str] = {}
    why: dict[str, str] = {}
    todo = list(names)
    started = wait.clock()
    deadline, delay = started + wait.timeout, FIRST_DELAY
    while True:
        for name in list(todo):
            try:
                found[name] = resolve(name)
            except UnicodeError:  # not a name at all: no wait makes it one
                _resolve_now(names[name], name, resolve)
            except OSError as err:
                why[name] = getattr(err, "strerror", None) or str(err)
                continue
            todo.remove(name)
        if not todo or (enough is not None and enough(found)):
            return found
        now = wait.clock()
        if now >= deadline:
            verb = "does" if len(todo) == 1 else "do"
            raise NamesUnresolved(
                f"{_by_option(todo, names)} still {verb} not resolve after "
                f"{wait.timeout:g} s (--rdzv_timeout): {why[todo[-1]]}",
                names[todo[0]].split(" ")[0],
            )
        wait.progress(
            f"waiting for names to resolve, still missing: {_by_option(todo, names)}",
            now - started,
            wait.timeout,
        )
        wait.sleep(min(delay, max(0.0, deadline - now)))
        delay = min(delay * 2, MAX_DELAY)


def _resolve_now(option: str, name: str, resolve: Callable[[str], str]) -> str:
    """`resolve(name)`, or the UsageError naming the option the name came from (as
    `addresses.resolve_for`, which this module may not import: the launcher's import
    chains stay short)."""
    try:
        return resolve(name)
    except (OSError, UnicodeError) as err:
        why = getattr(err, "strerror", None) or str(err)
        raise UsageError(f"{option}: {name!r} does not resolve ({why})", option) from None


def _by_option(missing: Sequence[str], names: Mapping[str, str]) -> str:
    """Missing names grouped by their option: "--ips: 'b', 'c'; --master_addr: 'm'"."""
    groups: dict[str, list[str]] = {}
    for name in missing:
        groups.setdefault(names[name], []).append(repr(name))
    return "; ".join(f"{option}: {', '.join(shown)}" for option, shown in groups.items())


def check_one_family(entries: Sequence[str], hosts: Sequence[str], option: str) -> None:
    """A job's nodes are all IPv4 or all IPv6: their workers connect to each other, and
    an IPv4 socket cannot reach an IPv6 address. Mixed lists are a UsageError naming an
    entry of each kind."""
    v6 = [(e, h) for e, h in zip(entries, hosts, strict=True) if h and netaddr.is_ipv6(h)]
    v4 = [(e, h) for e, h in zip(entries, hosts, strict=True) if h and not netaddr.is_ipv6(h)]
    if v6 and v4:
        (e4, h4), (e6, h6) = v4[0], v6[0]
        show4 = e4 if e4 == h4 else f"{e4} ({h4})"
        show6 = e6 if e6 == h6 else f"{e6} ({h6})"
        raise UsageError(
            f"{option}: mixes IPv4 entries ({show4}) and IPv6 entries ({show6}); give every "
            "node an address of one family (a name with both kinds takes its IPv4 address)",
            option.split(" ")[0],
        )
