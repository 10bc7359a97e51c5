"""Which hosts of the hostfile run the job, and with how many workers each.

DeepSpeed's filters, on the hostfile's hosts (the node order stays the file's):

    --include "a:0,1@b"  only host a's devices 0 and 1, and every device of host b
    --exclude "c@a:2"    every host but c, and host a without device 2
    --num_nodes N        the first N hosts;  --num_gpus N: N workers on each host
                         (`spares`: every host, N of them run the job: `spare_count`)

A host picked with device ids gets `--gpus` with them; otherwise its slots (or
--num_gpus) become `--slots`: one worker on each of its GPUs 0..N-1, as DeepSpeed reads
slots (N CPU workers on a host without GPUs); a host without either starts its
launcher's own default. A host named twice in a filter is merged, as DeepSpeed merges
it (``a:1@a:0,1`` is a:0,1). Mistakes (a host not in the file, a device past its slots,
--include with --exclude, nothing left) are `UsageError`s naming the option and the value.
"""

from __future__ import annotations

from collections.abc import Sequence

from paddlike.launch import NamedTuple
from paddlike.launch.context.options.record import UsageError

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.cluster.hostfile import Host

HOST_SEP = "@"  # DeepSpeed's separators: host1:0,1@host2
DEVICES_SEP = ":"


class Pick(NamedTuple):
    """One host of the job, in node order."""

    name: str
    workers: int | None  # --slots for this host; None: its launcher's default
    devices: tuple[int, ...] | None = None  # --gpus for this host (from --include/--exclude)

    def launcher_args(self) -> tuple[str, ...]:
        """What this host's launcher is told about its own workers."""
        if self.devices is not None:
            return ("--gpus", ",".join(map(str, self.devices)))
        if self.workers is not None:
            return ("--slots", str(self.workers))
        return ()


def parse_filter(text: str, option: str) -> dict[str, tuple[int, ...] | None]:
    """``a:0,1@b`` -> {"a": (0, 1), "b": None} (None: the whole host); a host named
    twice gets the union of its ids (``a:1@a:0,1`` -> (0, 1); ``a@a:1`` -> (1,), as in
    DeepSpeed, where named ids win over the whole host)."""
    picked: dict[str, tuple[int, ...] | None] = {}
    for part in text.split(HOST_SEP):
        name, sep, ids = part.strip().partition(DEVICES_SEP)
        if not name:
            raise UsageError(
                f"{option}: expected host[:id,id]@host..., e.g. worker-0:0,1@worker-1, "
                f"got {text!r}",
                option,
            )
        devices: tuple[int, ...] | None = None
        if sep:
            items = [t.strip() for t in ids.split(",")]
            if not all(t.isdigit() for t in items):
                raise UsageError(
                    f"{option}: expected device ids after '{name}:', e.g. {name}:0,1, got {text!r}",
                    option,
                )
            devices = tuple(sorted({int(t) for t in items}))
        before = picked.get(name)
        if before is not None:
            devices = tuple(sorted({*before, *(devices or ())}))
        picked[name] = devices
    return picked


def _check_known(
    picked: dict[str, tuple[int, ...] | None], hosts: Sequence[Host], option: str, path: str
) -> None:
    slots = {h.name: h.slots for h in hosts}
    for name, devices in picked.items():
        if name not in slots:
            raise UsageError(
                f"{option}: host {name!r} is not in the hostfile {path} "
                f"(it lists {', '.join(slots)})",
                option,
            )
        count = slots[name]
        past = [d for d in devices or () if count is not None and d >= count]
        if past:
            raise UsageError(
                f"{option}: {name} has slots={count} (devices 0..{count - 1}), "
                f"got device {past[0]}",
                option,
            )


def select_hosts(
    hosts: Sequence[Host],
    *,
    include: str | None = None,
    exclude: str | None = None,
    num_nodes: int | None = None,
    num_gpus: int | None = None,
    path: str = "hostfile",
    spares: bool = False,
) -> tuple[Pick, ...]:
    """The job's hosts from the hostfile's and the filters (see the module's table);
    `spares`: the hosts past --num_nodes are kept too (the pre-flight check chooses)."""
    if include and exclude:
        raise UsageError(
            "--include/--exclude: give one of them, not both (as in DeepSpeed)", "--include"
        )
    if (include or exclude) and (num_nodes or num_gpus):
        which = "--num_nodes" if num_nodes else "--num_gpus"
        raise UsageError(
            f"{which}: cannot be combined with --include/--exclude (they say which hosts and "
            "devices already)",
            which,
        )
    picks = [Pick(h.name, h.slots) for h in hosts]
    if include:
        chosen = parse_filter(include, "--include")
        _check_known(chosen, hosts, "--include", path)
        picks = [
            p if chosen[p.name] is None else Pick(p.name, None, chosen[p.name])
            for p in picks
            if p.name in chosen
        ]
    elif exclude:
        dropped = parse_filter(exclude, "--exclude")
        _check_known(dropped, hosts, "--exclude", path)
        kept = []
        for p in picks:
            if p.name not in dropped:
                kept.append(p)
                continue
            gone = dropped[p.name]
            if gone is None:
                continue
            if p.workers is None:
                raise UsageError(
                    f"--exclude: {p.name}'s devices are not known here (no slots= in the "
                    f"hostfile {path}): give it slots=N, or --include the devices to use",
                    "--exclude",
                )
            left = tuple(d for d in range(p.workers) if d not in gone)
            if left:
                kept.append(Pick(p.name, None, left))
        picks = kept
    if num_nodes is not None:
        if num_nodes > len(picks):
            raise UsageError(
                f"--num_nodes: the hostfile {path} lists {len(picks)} host(s), got {num_nodes}",
                "--num_nodes",
            )
        if not spares:
            picks = picks[:num_nodes]
    if num_gpus is not None:
        picks = [Pick(p.name, num_gpus) for p in picks]
    if not picks:
        raise UsageError(
            f"--exclude: no host or device of the hostfile {path} is left, got {exclude!r}",
            "--exclude",
        )
    return tuple(picks)


def spare_count(
    picks: Sequence[Pick], num_nodes: int | None, preflight: str | None, launcher: str | None
) -> int:
    """How many of the picked hosts are spares: those past --num_nodes, where the
    pre-flight check chooses (`--preflight` on or full, by default for more than one
    node) and the hosts start over ssh (`cluster.spares`). Otherwise the first N hosts
    run (DeepSpeed's --num_nodes): no spare."""
    if num_nodes is None or num_nodes >= len(picks) or launcher not in (None, "ssh"):
        return 0
    checked = preflight in ("on", "full") or (preflight is None and num_nodes > 1)
    return len(picks) - num_nodes if checked else 0
