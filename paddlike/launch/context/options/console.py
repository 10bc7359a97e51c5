"""Which local workers' output the console shows: paddlike's --console (torchrun's
--local_ranks_filter), and torchrun's -t/--tee and -r/--redirects with torchrun's meaning.

Every worker's stdout and stderr always go to its log file (workerlog.N); the console
echoes the chosen workers' files as they grow (`console/tee.py`). torchrun's words, per
stream (0 none, 1 stdout, 2 stderr, 3 both; or a map per local rank, ``0:3,1:1``, whose
unnamed ranks are 0):

- ``--redirects R``: R's streams go to the log files only, not to the console;
- ``--tee T``: T's streams go to the log files and to the console (a tee also redirects);
- ``--local_ranks_filter 0,1``: only these local ranks are shown.

So worker i's stream s is on the console when i passes the filter and s is not in
R[i] - T[i]. Without any of torchrun's three, paddlike shows local worker 0 (Paddle's
console); with -t or -r but no filter, every worker, as torchrun does. A choice that
shows one stream of a worker (``-r 1``: stderr only; ``-r 0:2``: local rank 0's stdout)
keeps the two streams in two files, as torchrun always does (stdout in workerlog.N,
stderr in workerlog.N.err: --redirect_stdout_and_stderr), and the console follows only
the file of the stream shown (`streams`, `ProcessSpec.console_streams`).

    no option                          -> "0"     (paddlike's default)
    --tee 3 / -t 3 / --tee 0 / -r 0    -> "all"   (torchrun's default console)
    -r 3 (--tee none)                  -> "none"
    --tee 3 --local_ranks_filter 0     -> "0"     (torchtitan's command line)
    -r 3 -t 0:3                        -> "0"
    -r 2                               -> "all", stdout only (stderr in workerlog.N.err)
"""

from __future__ import annotations

from collections.abc import Mapping

from paddlike.launch.context.options.record import UsageError

BOTH = 3
_STREAM = {1: "stdout", 2: "stderr"}


def std(text: str) -> int | dict[int, int]:
    """torchrun's Std: "0".."3" for every local rank, or "rank:std,..." per rank; paddlike's
    words "all" (3) and "none" (0 on the console) too. ValueError says what was expected."""
    text = text.strip().lower()
    words = {"0": 0, "1": 1, "2": 2, "3": 3, "all": BOTH}
    if text in words:
        return words[text]
    expected = (
        "expected 0 (none), 1 (stdout), 2 (stderr), 3 (both) as in torchrun, or a map of "
        f"local rank to those, e.g. 0:3,1:1, got {text!r}"
    )
    if "," in text and ":" not in text and all(t.strip().isdigit() for t in text.split(",")):
        # a list of local ranks ("0,1") is what --local_ranks_filter takes; a lone number
        # ("4") is more likely a stream choice out of range: the expected values say it all
        raise ValueError(
            f"{expected}; to choose which local workers the console shows, use --console "
            f"{text} (torchrun's --local_ranks_filter)"
        )
    if ":" not in text:
        raise ValueError(expected)
    out: dict[int, int] = {}
    for item in text.split(","):
        rank, sep, value = item.strip().partition(":")
        if not (sep and rank.isdigit() and value in ("0", "1", "2", "3")):
            raise ValueError(expected)
        if int(rank) in out:
            raise ValueError(f"local rank {int(rank)} is listed twice, got {text!r}")
        out[int(rank)] = int(value)
    return out


def named_ranks(
    tee: tuple[str, str] | None, redirects: tuple[str, str] | None
) -> tuple[tuple[str, int], ...]:
    """The local ranks torchrun's maps name, each with the option that names it
    (``-t 2:3`` -> (("-t", 2),)): a rank this node does not run is refused once the plan
    knows how many it runs (launch/main.py's check of --console)."""
    found = []
    for given in (tee, redirects):
        if given is None or given[0].strip().lower() == "none":
            continue
        parsed = _parsed(given)
        if isinstance(parsed, dict):
            found.extend((given[1], rank) for rank in sorted(parsed))
    return tuple(found)


def _rest(choice: int | dict[int, int]) -> int:
    """The value of the ranks a choice does not name: the scalar, or torchrun's 0 for a map."""
    return choice if isinstance(choice, int) else 0


def _at(choice: int | dict[int, int], rank: int) -> int:
    return choice if isinstance(choice, int) else choice.get(rank, 0)


def choose(
    console: str | None,
    tee: tuple[str, str] | None,
    redirects: tuple[str, str] | None,
    nproc: object,
) -> str:
    """The console choice as --console's text ("0", "0,2", "all" or "none").

    `console`: --console / --local_ranks_filter as checked (None: not given); `tee`,
    `redirects`: torchrun's values with the option or variable they came from; `nproc`:
    --nproc_per_node when a number (needed only for a map that hides some ranks of
    every rank). Raises `UsageError` naming the option.
    """
    if tee is None and redirects is None:
        return console or "0"
    if tee is not None and tee[0].strip().lower() == "none":
        return "none"  # paddlike's word: the log files only
    t = _parsed(tee)
    r = _parsed(redirects)
    shown = _chosen(console)  # None: every local rank
    named = set(t if isinstance(t, dict) else ()) | set(r if isinstance(r, dict) else ())

    def off(rank: int | None) -> int:
        """The streams of `rank` (None: an unnamed one) kept off the console."""
        if rank is None:
            return _rest(r) & ~_rest(t)
        return _at(r, rank) & ~_at(t, rank)

    if off(None) == BOTH:  # only named ranks can be on the console
        visible = {rank for rank in named if off(rank) != BOTH}
    else:
        hidden = {rank for rank in named if off(rank) == BOTH}
        if shown is None and not hidden:
            return "all"
        if shown is None:
            if not isinstance(nproc, int):
                assert redirects is not None
                raise UsageError(
                    f"{redirects[1]}: {redirects[0]!r} keeps some local ranks off the console "
                    "and shows every other one; say which ranks there are with "
                    "--local_ranks_filter (or --nproc_per_node N)",
                    _option(redirects[1]),
                )
            shown = set(range(nproc))
        visible = shown - hidden
    if shown is not None:
        visible &= shown
    return ",".join(map(str, sorted(visible))) if visible else "none"


def streams(
    tee: tuple[str, str] | None, redirects: tuple[str, str] | None
) -> tuple[tuple[int, int], ...]:
    """When some worker is shown with one stream only: the streams shown of each local rank
    the choice names and of the rest (-1), ((rank, 0 none | 1 stdout | 2 stderr | 3 both),
    ...). () when every worker shown is shown whole (nothing changes in the log layout)."""
    if (tee is None and redirects is None) or (
        tee is not None and tee[0].strip().lower() == "none"
    ):
        return ()
    t, r = _parsed(tee), _parsed(redirects)
    named = set(t if isinstance(t, dict) else ()) | set(r if isinstance(r, dict) else ())
    shown = []
    for rank in [None, *sorted(named)]:
        off = _rest(r) & ~_rest(t) if rank is None else _at(r, rank) & ~_at(t, rank)
        shown.append((-1 if rank is None else rank, BOTH & ~off))
    return tuple(shown) if any(mask in _STREAM for _, mask in shown) else ()


def _parsed(given: tuple[str, str] | None) -> int | dict[int, int]:
    if given is None:
        return 0
    try:
        return std(given[0])
    except ValueError as bad:
        raise UsageError(f"{given[1]}: {bad}", _option(given[1])) from None


def _chosen(console: str | None) -> set[int] | None:
    """--console's workers as a set, None for every worker (not given, or "all")."""
    if console is None or console == "all":
        return None
    if console == "none":
        return set()
    return {int(t) for t in console.split(",")}


def _option(source: str) -> str:
    """The option a source names: "-t" -> "--tee", "--tee (from PET_TEE)" -> "--tee"."""
    source = source.partition(" ")[0]
    return {"-t": "--tee", "-r": "--redirects"}.get(source, source)


def their_console(
    extra: Mapping[str, object], environ: Mapping[str, str]
) -> tuple[tuple[str, str] | None, tuple[str, str] | None]:
    """torchrun's tee and redirects as (text, where from): the flag (-t, --tee, -r,
    --redirects), then PADDLIKE_TEE / PADDLIKE_REDIRECTS, then PET_TEE / PET_REDIRECTS
    (`others.translate_compat` left them in `extra`, PET_ ones included)."""
    found: list[tuple[str, str] | None] = []
    for name in ("tee", "redirects"):
        hit = extra.get(name)
        ours = "PADDLIKE_" + name.upper()
        if (hit is None or str(hit[1]).startswith("PET_")) and ours in environ:  # type: ignore[index]
            hit = (environ[ours], ours)
        if hit is not None and not str(hit[1]).startswith("-"):  # type: ignore[index]
            hit = (hit[0], f"--{name} (from {hit[1]})")  # type: ignore[index]
        found.append(hit)  # type: ignore[arg-type]
    return found[0], found[1]
