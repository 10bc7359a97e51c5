"""DeepSpeed's hostfile: one host a line, ``host slots=N``, ``#`` comments.

    worker-0 slots=4     -> Host("worker-0", 4)
    worker-1             -> Host("worker-1", None)   (slots: all of that host's devices)
    # a comment, or a blank line, is skipped; so is the rest of a line after "#"

A host named twice, a line of other words or a slot count that is not a positive integer
is the user's mistake: `UsageError` naming the file, the line number and the line.
"""

from __future__ import annotations

from collections.abc import Sequence

from paddlike.launch import NamedTuple
from paddlike.launch.context.options.record import UsageError

# the names by which every host reaches itself (`here.is_this_machine`; refused beside
# other hosts: `start.plan_remote_job`)
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]", "ip6-localhost")


class Host(NamedTuple):
    """One line of the hostfile."""

    name: str
    slots: int | None  # None: the host's own default (every visible device, or one CPU worker)


def parse_hostfile(text: str, path: str = "hostfile") -> tuple[Host, ...]:
    """The hosts of a hostfile's text, in the file's order (which is the node order)."""
    hosts: list[Host] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        where = f"--hostfile: {path} line {number}"
        slots: int | None = None
        for word in words[1:]:
            key, eq, value = word.partition("=")
            if key != "slots" or not eq:
                # a near miss of "slots" (slot=, Slots=, slost=) is most likely meant
                near = eq and key.lower() in ("slot", "slots", "solts", "slost", "sltos")
                hint = f" (did you mean 'slots={value}'?)" if near else ""
                raise UsageError(
                    f"{where}: expected 'host' or 'host slots=N', got {raw.strip()!r}{hint}",
                    "--hostfile",
                )
            if slots is not None:
                raise UsageError(f"{where}: slots= given twice in {raw.strip()!r}", "--hostfile")
            if not value.isdigit() or int(value) < 1:
                raise UsageError(
                    f"{where}: slots must be a positive integer, got {value!r}", "--hostfile"
                )
            slots = int(value)
        name = words[0]
        host, colon, count = name.partition(":")
        if colon and count.isdigit() and ":" not in count:  # Horovod's host:N (not IPv6)
            raise UsageError(
                f"{where}: expected 'host slots=N' (DeepSpeed's format), got {raw.strip()!r}: "
                f"Horovod's {name} is written '{host} slots={count}' here",
                "--hostfile",
            )
        if name.startswith("-"):
            raise UsageError(
                f"{where}: host {name!r} starts with '-' (ssh would read it as an option)",
                "--hostfile",
            )
        if name in seen:
            raise UsageError(
                f"{where}: host {name!r} is listed twice (first on line {seen[name]})",
                "--hostfile",
            )
        seen[name] = number
        hosts.append(Host(name, slots))
    if not hosts:
        raise UsageError(f"--hostfile: {path} lists no host", "--hostfile")
    return tuple(hosts)


def read_hostfile(path: str) -> tuple[Host, ...]:
    """`parse_hostfile` of a file; a file that cannot be read is a `UsageError` too."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise UsageError(
            f"--hostfile: cannot read {path!r} ({exc.strerror})", "--hostfile"
        ) from None
    except UnicodeDecodeError:
        raise UsageError(f"--hostfile: {path!r} is not text", "--hostfile") from None
    return parse_hostfile(text, path)


def is_loopback(name: str) -> bool:
    """A name by which every host reaches itself: localhost, ::1, 127.x."""
    return name in LOOPBACK_NAMES or name.startswith("127.")


def refuse_loopback_among_others(names: Sequence[str]) -> None:
    """`localhost` (or 127.x) beside other hosts: each host would reach itself by that name,
    so node 0 and the peers' addresses would be wrong everywhere but here."""
    if len(names) < 2:
        return
    for name in names:
        if is_loopback(name):
            raise UsageError(
                f"--hostfile: {name!r} beside other hosts names a different machine on "
                "each of them (their own loopback); write this machine's host name or "
                "address instead",
                "--hostfile",
            )
