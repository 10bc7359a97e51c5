"""Which devices each local worker gets: GPUs found without CuPy, ids as the worker sees them.

The launcher must not import CuPy (slow, and absent on CPU nodes). GPUs are found by
NVML (``libnvidia-ml.so.1`` through ctypes, which sees what a container was given) when
``/dev/nvidiactl`` exists, else by the driver's ``/proc/driver/nvidia/gpus`` entries (one
directory per PCI device, which in a container may list the host's GPUs).
``PADDLIKE_GPU_PROBE=proc`` skips NVML (``nvml``: NVML only).

Without ``--gpus`` a node gets one worker per *visible* GPU: CUDA_VISIBLE_DEVICES is read
the way CUDA reads it (indices or ``GPU-``/``MIG-`` UUIDs; an entry that names no GPU
hides itself and every entry after it). UUIDs are matched through NVML; with only
/proc they count as visible GPUs, in order. ``--nproc_per_node K`` splits the visible
GPUs into K contiguous slices. ``--slots N`` (a hostfile's ``host slots=N``, as DeepSpeed
reads it) is one worker on each of the first N visible GPUs, the rest unused; N CPU
workers where none is visible. CPU workers only when no GPU is visible, or with
``--devices cpu`` / ``--nproc_per_node cpu``.

``--gpus`` ids are physical ids (entries of CUDA_VISIBLE_DEVICES when it is set), and
workers get their position in the visible list, as Paddle's launcher does:

    CUDA_VISIBLE_DEVICES   --gpus   --nproc_per_node   worker sees
    (unset), 2 GPUs        -        -                  0 | 1
    2,3 (4 GPUs)           -        -                  0 | 1
    (unset), 4 GPUs        -        2                  0,1 | 2,3
    (unset), 8 GPUs        --slots 3                   0 | 1 | 2
    2,3                    3        -                  1
    2,3                    1        -                  error: 1 is not in CUDA_VISIBLE_DEVICES
    (unset), 1 GPU         -        2                  error: two workers on one GPU
    (unset), no GPU        -        -                  cpu (one worker)
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from paddlike.contract import CUDA_VISIBLE_DEVICES, GPUS_GIVEN_AS
from paddlike.launch import NamedTuple
from paddlike.launch.context.options.record import LaunchOptions, UsageError

NVIDIA_GPUS_DIR = "/proc/driver/nvidia/gpus"
NVIDIA_CTL = "/dev/nvidiactl"  # exists wherever a CUDA program could run; a stat, not a dlopen
NVML_LIBRARY = "libnvidia-ml.so.1"
GPU_PROBE = "PADDLIKE_GPU_PROBE"  # auto (default) | proc | nvml
_UUID_PREFIXES = ("GPU-", "MIG-")


# --- what the node has --------------------------------------------------------------------


class NodeGpus(NamedTuple):
    """This node's NVIDIA GPUs in CUDA's order (PCI bus order) and how they were found."""

    count: int
    uuids: tuple[str, ...] = ()  # per index, from NVML; empty when found through /proc
    source: str = ""  # "NVML" | NVIDIA_GPUS_DIR | "" (none found)
    tried: str = ""  # what was looked at, for "no GPU found" messages


def count_gpus(gpus_dir: str = NVIDIA_GPUS_DIR) -> int:
    """The number of NVIDIA GPUs the driver lists (one directory per PCI device); 0 if none."""
    try:
        return sum(1 for entry in os.scandir(gpus_dir) if entry.is_dir())
    except OSError:
        return 0


def nvml_gpus(library: str = NVML_LIBRARY) -> NodeGpus | None:
    """The GPUs NVML reports, with their UUIDs; None when NVML cannot be loaded or fails.

    ctypes is imported here only: a CPU node never pays for it.
    """
    import ctypes

    try:
        nvml = ctypes.CDLL(library)
    except OSError:
        return None
    if nvml.nvmlInit_v2() != 0:
        return None
    try:
        count = ctypes.c_uint(0)
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return None
        uuids = []
        for index in range(count.value):
            handle = ctypes.c_void_p()
            buf = ctypes.create_string_buffer(96)  # NVML_DEVICE_UUID_V2_BUFFER_SIZE
            ok = nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) == 0
            ok = ok and nvml.nvmlDeviceGetUUID(handle, buf, len(buf)) == 0
            uuids.append(buf.value.decode("ascii", "replace") if ok else "")
        return NodeGpus(count.value, tuple(uuids), "NVML")
    finally:
        nvml.nvmlShutdown()


def probe_gpus(
    environ: Mapping[str, str],
    *,
    gpus_dir: str = NVIDIA_GPUS_DIR,
    nvidia_ctl: str = NVIDIA_CTL,
    library: str = NVML_LIBRARY,
) -> NodeGpus:
    """NVML where a driver device node exists, else /proc; `PADDLIKE_GPU_PROBE` forces one."""
    how = environ.get(GPU_PROBE, "auto").strip().lower() or "auto"
    if how not in ("auto", "proc", "nvml"):
        raise UsageError(
            f"{GPU_PROBE}: expected auto, proc or nvml, got {environ[GPU_PROBE]!r}", GPU_PROBE
        )
    tried = []
    if how == "nvml" or (how == "auto" and os.path.exists(nvidia_ctl)):
        found = nvml_gpus(library)
        if found is not None:  # NVML answered: 0 means this container was given no GPU
            return found if found.count else NodeGpus(0, (), "", f"NVML ({library}) found none")
        tried.append(f"NVML ({library}) not loadable")
    if how != "nvml":
        count = count_gpus(gpus_dir)
        if count:
            return NodeGpus(count, (), gpus_dir)
        tried.append(f"{gpus_dir} " + ("is empty" if os.path.isdir(gpus_dir) else "is missing"))
    return NodeGpus(0, (), "", "; ".join(tried))


# --- which of them the workers may use ---------------------------------------------------


class Visible(NamedTuple):
    """The GPUs CUDA_VISIBLE_DEVICES leaves, in the order workers number them."""

    physical: tuple[str, ...]  # per visible position: the physical index, or the UUID entry
    note: str  # how CUDA_VISIBLE_DEVICES was read ("" when unset)


def _match_uuid(entry: str, uuids: Sequence[str]) -> int | None:
    """CUDA accepts a unique prefix of a UUID (with its GPU- part)."""
    hits = [i for i, u in enumerate(uuids) if u and u.startswith(entry)]
    return hits[0] if len(hits) == 1 else None


def visible_gpus(environ: Mapping[str, str], gpus: NodeGpus) -> Visible:
    """Apply CUDA_VISIBLE_DEVICES to the node's GPUs as the CUDA runtime does.

    An entry that names no GPU (``-1``, an index past the last GPU, an unknown UUID) hides
    itself and every later entry. A GPU listed twice is an error: two workers would share it.
    """
    value = environ.get(CUDA_VISIBLE_DEVICES)
    if value is None:
        return Visible(tuple(str(i) for i in range(gpus.count)), "")
    entries = [t.strip() for t in value.split(",")] if value.strip() else []
    physical: list[str] = []
    stopped: str | None = None
    for entry in entries:
        if entry.isdigit() and int(entry) < gpus.count:
            name = str(int(entry))
        elif entry.startswith(_UUID_PREFIXES) and gpus.count:
            index = _match_uuid(entry, gpus.uuids) if gpus.uuids else None
            if index is None and gpus.uuids and entry.startswith("GPU-"):
                stopped = entry
                break
            name = entry if index is None else str(index)
        else:
            stopped = entry
            break
        if name in physical:
            raise UsageError(
                f"{CUDA_VISIBLE_DEVICES}: GPU {name} is listed twice in {value!r}; two workers "
                f"cannot share one GPU (NCCL refuses two ranks on one device); list each GPU once",
                CUDA_VISIBLE_DEVICES,
            )
        if len(physical) == gpus.count:  # unmatched UUIDs: never more GPUs than the node has
            stopped = entry
            break
        physical.append(name)
    note = f"{CUDA_VISIBLE_DEVICES}={value!r} leaves {len(physical)} of {gpus.count}"
    if stopped is not None:
        note += f" (CUDA ignores {stopped!r} and every entry after it)"
    return Visible(tuple(physical), note)


# --- the assignment ----------------------------------------------------------------------


class DeviceAssignment(NamedTuple):
    """The devices of each local worker, as the worker sees them; empty tuples on CPU."""

    kind: str  # "gpu" | "cpu"
    per_worker: tuple[tuple[str, ...], ...]
    physical: tuple[tuple[str, ...], ...] = ()  # per worker: physical ids (or UUIDs); () on CPU
    why: str = ""  # one line for the banner and --dry_run: what was found and which rule chose

    @property
    def nproc(self) -> int:
        return len(self.per_worker)

    def describe(self) -> str:
        """`why`, and each worker's GPUs unless worker i simply has GPU i:

        2 GPUs found by NVML, CUDA_VISIBLE_DEVICES='2,3' leaves 2 of 4: one worker per GPU;
        worker 0: gpu 0 (physical 2), worker 1: gpu 1 (physical 3)
        """
        if self.kind == "cpu":
            return self.why
        trivial = all(
            seen == phys == (str(i),)
            for i, (seen, phys) in enumerate(zip(self.per_worker, self.physical, strict=True))
        )
        if trivial or len(self.physical) != self.nproc:
            return self.why
        parts = []
        for i, (seen, phys) in enumerate(zip(self.per_worker, self.physical, strict=True)):
            text = f"worker {i}: gpu {','.join(seen)}"
            if phys != seen:
                text += f" (physical {','.join(phys)})"
            parts.append(text)
        return f"{self.why}; {', '.join(parts)}"

    @property
    def per_node(self) -> str:
        """What every node of a job must agree on (the rendezvous fingerprint's value)."""
        if self.kind == "cpu":
            return "cpu"
        n = sum(len(d) for d in self.per_worker)
        return f"{n} GPU{'s' if n != 1 else ''}"


def _cpu(nproc: int, why: str) -> DeviceAssignment:
    return DeviceAssignment("cpu", tuple(() for _ in range(nproc)), (), why)


def _slices(items: Sequence[str], nproc: int) -> tuple[tuple[str, ...], ...]:
    step = len(items) // nproc
    return tuple(tuple(items[i * step : (i + 1) * step]) for i in range(nproc))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def _found(gpus: NodeGpus) -> str:
    return f"{_plural(gpus.count, 'GPU')} found by {gpus.source}"


def _split(
    relative: Sequence[str], physical: Sequence[str], nproc: int, what: str, option_text: str
) -> DeviceAssignment:
    """Contiguous slices of `relative` (and `physical`) for `nproc` workers, or UsageError."""
    n = len(relative)
    if nproc > n:
        raise UsageError(
            f"--nproc_per_node: {nproc} workers on the {_plural(n, 'GPU')} of {what} would put "
            f"two workers on one GPU, which NCCL refuses; use at most {n} (a divisor of {n}), "
            f"or --devices cpu for CPU workers",
            "--nproc_per_node",
        )
    if n % nproc:
        raise UsageError(
            f"--nproc_per_node: {nproc} does not divide the {_plural(n, 'GPU')} of {what}; "
            f"give a divisor of {n}",
            "--nproc_per_node",
        )
    per = n // nproc
    rule = (
        "one worker per GPU"
        if per == 1
        else f"--nproc_per_node {nproc} splits them into {nproc} slices of {per}"
    )
    return DeviceAssignment(
        "gpu", _slices(relative, nproc), _slices(physical, nproc), f"{option_text}: {rule}"
    )


def _first_gpus(
    relative: Sequence[str], physical: Sequence[str], slots: int, what: str
) -> DeviceAssignment:
    """--slots N: one worker on each of the first N visible GPUs (DeepSpeed's slots)."""
    if slots > len(relative):
        raise UsageError(
            f"--slots: {slots} (the hostfile's slots={slots} for this host) asks for more GPUs "
            f"than this node has visible ({what}); give slots={len(relative)} or fewer",
            "--slots",
        )
    unused = len(relative) - slots
    rule = f"--slots {slots}: one worker on each of GPUs 0..{slots - 1}" + (
        f" ({unused} unused)" if unused else ""
    )
    return DeviceAssignment(
        "gpu",
        tuple((d,) for d in relative[:slots]),
        tuple((d,) for d in physical[:slots]),
        f"{what}: {rule}",
    )


def assign_devices(
    gpus: Sequence[str] | None,
    nproc_per_node: int | None,
    *,
    environ: Mapping[str, str],
    found: NodeGpus | None = None,
    gpu_count: int | None = None,
    nproc_kind: str | None = None,
    cpu_only: bool = False,
    cpu_count: int = 1,
    dry_run: bool = False,
    slots: int | None = None,
    named: str = "--gpus",
) -> DeviceAssignment:
    """Split this node's devices among its workers: contiguous slices, in order.

    `found` (from `probe_gpus`; or just a `gpu_count`) and `cpu_count` are passed in so
    that this stays free of I/O. `nproc_kind` is --nproc_per_node's word (gpu, cpu, auto;
    torchrun's meanings), `cpu_only` is --devices cpu. A GPU that is not there is an
    error, except under --dry_run with --gpus, which only prints. `named`: how the user
    gave `gpus` (`gpus_named`), which the refusals of `gpus` name.
    """
    if found is None:
        found = NodeGpus(gpu_count or 0, (), NVIDIA_GPUS_DIR if gpu_count else "", "given")
    if nproc_kind == "cpu":
        return _cpu(cpu_count, f"--nproc_per_node cpu: one CPU worker per CPU ({cpu_count})")
    if slots is not None and cpu_only:
        return _cpu(slots, f"--slots {slots}, --devices cpu: CPU workers")
    if cpu_only:
        if nproc_kind == "auto":
            return _cpu(cpu_count, f"--devices cpu, --nproc_per_node auto: {cpu_count} CPUs")
        return _cpu(nproc_per_node or 1, "--devices cpu: CPU workers")
    if gpus is not None:
        return _listed(
            gpus, nproc_per_node, environ=environ, found=found, dry_run=dry_run, named=named
        )
    visible = visible_gpus(environ, found)
    if not visible.physical:
        if found.count:
            why = f"no GPU visible ({_found(found)}; {visible.note})"
        else:
            why = f"no NVIDIA GPU found ({found.tried or 'not looked for'})"
        if nproc_kind == "gpu":
            raise UsageError(
                f"--nproc_per_node: 'gpu' needs a visible NVIDIA GPU, and there is {why}; "
                f"use --nproc_per_node cpu or a number for CPU workers",
                "--nproc_per_node",
            )
        if nproc_kind == "auto":
            return _cpu(cpu_count, f"{why}: --nproc_per_node auto runs one CPU worker per CPU")
        return _cpu(slots or nproc_per_node or 1, f"{why}: CPU workers")
    physical = visible.physical
    relative = tuple(str(i) for i in range(len(physical)))
    what = _found(found) + (f", {visible.note}" if visible.note else "")
    if slots is not None:
        return _first_gpus(relative, physical, slots, what)
    nproc = nproc_per_node or len(physical)
    return _split(relative, physical, nproc, f"this node ({what})", what)


def _listed(
    gpus: Sequence[str],
    nproc_per_node: int | None,
    *,
    environ: Mapping[str, str],
    found: NodeGpus,
    dry_run: bool,
    named: str = "--gpus",
) -> DeviceAssignment:
    """--gpus: physical ids, mapped to their position among the visible GPUs."""
    shown = ",".join(gpus)
    value = environ.get(CUDA_VISIBLE_DEVICES)
    if value is not None:
        listed = [t.strip() for t in value.split(",") if t.strip()]
        # With NVML, UUID entries are known by their index too.
        if found.uuids:
            listed = [
                str(i) if (i := _match_uuid(t, found.uuids)) is not None else t for t in listed
            ]
        missing = [g for g in gpus if g not in listed]
        if missing:
            raise UsageError(
                f"{named}: {missing[0]} is not in CUDA_VISIBLE_DEVICES={value!r}; "
                f"give ids from that list, got {shown!r}",
                _option_of(named),
            )
        relative = tuple(str(listed.index(g)) for g in gpus)
    else:
        relative = tuple(gpus)
    refusal = _missing_gpus(gpus, found, shown, named)
    if refusal is not None and not dry_run:
        raise UsageError(refusal, _option_of(named))
    what = f"--gpus {shown}"
    if value is not None:
        what += f" (physical ids; workers number them in {CUDA_VISIBLE_DEVICES}={value!r})"
    done = _split(relative, tuple(gpus), nproc_per_node or len(relative), f"--gpus {shown}", what)
    if refusal is None:
        return done
    # --dry_run previews the plan for a node that has these GPUs; this one has not.
    warning = f"; warning: a launch on this node exits 2 ({refusal.removeprefix(named + ': ')})"
    return DeviceAssignment(done.kind, done.per_worker, done.physical, done.why + warning)


def _missing_gpus(
    gpus: Sequence[str], found: NodeGpus, shown: str, named: str = "--gpus"
) -> str | None:
    """Why a launch on this node refuses `--gpus`, or None when every GPU listed is here."""
    if found.count == 0:
        return (
            f"{named}: no NVIDIA GPU found on this node ({found.tried}), got {shown!r}; "
            f"{_for_cpu_workers(named)}"
        )
    too_big = [g for g in gpus if int(g) >= found.count]
    if too_big:
        return (
            f"{named}: GPU {too_big[0]} does not exist, this node has {found.count} "
            f"(ids 0-{found.count - 1}, {found.source}), got {shown!r}"
        )
    return None


# --- how the refusals name --gpus ---------------------------------------------------------

# DeepSpeed's filters that pick GPU ids of a hostfile's hosts (`cluster.selection`)
_FILTERS = ("--include", "--exclude", "--num_gpus")


def gpus_named(options: LaunchOptions, environ: Mapping[str, str]) -> str:
    """How the user gave --gpus, for its refusals: as typed (``--devices``), with its
    variable (``--devices (from PADDLE_DEVICES)``), or what it was derived from
    (``--exclude localhost:1`` of a hostfile: `LaunchOptions.labels`); on a host the
    cluster starter started, what the user gave on the starting machine (`GPUS_GIVEN_AS`,
    set by the starter for the --gpus it wrote in each host's command)."""
    named = options.label("gpus")
    if named == "--gpus" and environ.get(GPUS_GIVEN_AS):
        return environ[GPUS_GIVEN_AS]
    return named


def _option_of(named: str) -> str:
    """The option a refusal is about (`UsageError.option`): --devices, --exclude."""
    words = named.split()
    return next((w for w in words if w in _FILTERS), words[0])


def _for_cpu_workers(named: str) -> str:
    """What to do on a machine without GPUs, for --gpus given as `named`."""
    words = named.split()
    if "(from" in words and not words[-1].startswith("-"):  # a variable: unset it
        return f"unset {words[-1].rstrip(')')} to run CPU workers"
    if words[0] in ("--include", "--exclude"):  # DeepSpeed's filters picked GPU ids
        return (
            "to run CPU workers, name the hosts without GPU ids and give --devices cpu "
            "(with a hostfile, each host's slots become CPU workers)"
        )
    return f"drop {_option_of(named)} to run CPU workers"


def node_devices(options: LaunchOptions, environ: Mapping[str, str]) -> DeviceAssignment:
    """This node's devices for its workers: the one call the launcher makes (probes GPUs)."""
    if options.slots is not None:
        other = (
            "--gpus" if options.gpus is not None
            else "--nproc_per_node" if options.nproc_per_node is not None
            or options.nproc_per_node_kind is not None
            else None
        )  # fmt: skip
        if other:
            raise UsageError(
                f"--slots: says this host's workers already (one on each of GPUs 0.."
                f"{options.slots - 1}); give it or {other}, not both",
                "--slots",
            )
    needs_gpus = not options.cpu_only and options.nproc_per_node_kind != "cpu"
    return assign_devices(
        options.gpus,
        options.nproc_per_node,
        environ=environ,
        found=probe_gpus(environ) if needs_gpus else NodeGpus(0),
        nproc_kind=options.nproc_per_node_kind,
        cpu_only=options.cpu_only,
        cpu_count=os.cpu_count() or 1,
        dry_run=options.dry_run,
        slots=options.slots,
        named=gpus_named(options, environ),
    )
