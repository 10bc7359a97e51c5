"""`parse_options`: the launcher's command line and environment into one record.

The steps, each in its own module: split at the training script and parse ours
(`parser`), take the other launchers' options out and translate them (`others`), pick
each option's value from its sources (`sources`), check it and put it in its fields (its
row of `our_table`: `Option.check`, `Option.into`), then the rules between options (`rules`).
Bad input raises `UsageError` naming the option, its source and the value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from paddlike.launch.context.options import console, others, parser, rules, values
from paddlike.launch.context.options.our_table import OPTIONS
from paddlike.launch.context.options.parser import split_argv
from paddlike.launch.context.options.record import LaunchOptions, Source, UsageError
from paddlike.launch.context.options.sources import resolve


def parse_options(argv: Sequence[str], environ: Mapping[str, str]) -> LaunchOptions:
    """Parse and validate the launcher's command line; raise `UsageError` on bad input."""
    ours, script = split_argv(argv)
    names = parser.typed_names(argv[: len(argv) - len(script)])  # messages name them as typed
    ours, theirs, extra, named = others.their_options(ours, environ, names)
    try:
        ns = parser.parse_ours(ours)  # only our options: positionals come from `script`
    except UsageError as exc:
        raise UsageError(f"{exc}{_script_after(exc, script)}", exc.option) from None
    typed = parser.typed_spellings(names)
    if not script:
        taken = ""  # `--preload train.py`: the script went to the option before it
        if len(argv) >= 2 and argv[-1].endswith(".py") and argv[-2].startswith("-"):
            taken = f" ({argv[-1]!r} was taken as the value of {argv[-2]})"
        raise UsageError(
            f"training_script: missing{taken}; usage: python -m paddlike.launch [options] "
            "training_script [args ...]",
            "training_script",
        )
    raw: dict[str, object] = {}
    given: set[str] = set()
    sources = {}
    for option in OPTIONS:
        if option.switch:
            continue
        dest = option.dest
        found = resolve(dest, ns.get(dest), theirs.get(dest), environ, typed.get(dest))
        if found is None:
            continue
        text, source = found
        try:
            value = option.check(text)  # type: ignore[misc]
        except values.BadValue as bad:
            hint = option.hint_for(text) if str(bad).startswith("expected") else ""
            # named as typed: --devices, not the --gpus it stands for
            label = source.label(dest)
            raise UsageError(f"{label}: {bad}, got {text!r}{hint}", f"--{dest}") from None
        raw.update(option.fields_of(value, source))
        given.add(dest)
        sources[dest] = source
    others.paddlecloud_ports(raw, environ)
    tee, redirects = console.their_console(extra, environ)
    raw["console"] = console.choose(raw.get("console"), tee, redirects, raw.get("nproc_per_node"))
    for option in OPTIONS:
        if option.switch:
            _switch(raw, option.dest, ns.get(option.dest), environ)
    raw["console_streams"] = console.streams(tee, redirects)
    raw["console_ranks"] = console.named_ranks(tee, redirects)
    if raw["console_streams"]:  # one stream of a worker shown: each stream in its own file
        raw["redirect_stdout_and_stderr"] = True
    if "job_token_file" in raw:
        if "job_token" in given:
            raise UsageError(
                "--job_token_file: give the token by --job_token or by --job_token_file, "
                "not both (got both; values not shown: they are secrets)",
                "--job_token_file",
            )
        raw["job_token"] = token_from_file(raw.pop("job_token_file"), sources["job_token_file"])
    others.apply_extra(raw, extra, named)
    rules.any_port_master(raw, sources.get("master"))
    fleet_master = theirs.get("master")
    if (
        fleet_master is not None
        and named.get("elastic_server") == fleet_master[1].name
        and raw.get("master") == fleet_master[0]
    ):
        given.add("elastic_server")  # the launchers meet at fleet's server: its rule applies
    # every message after this one names the option as given (`LaunchOptions.label`)
    raw["labels"] = tuple((d, s.label(d)) for d, s in sources.items() if s.label(d) != f"--{d}")
    rules.elastic_fields(raw, given, dict(raw["labels"]))
    raw["run_mode"] = rules.infer_run_mode(raw, given)
    raw["pass_local_rank"] = rules.passes_local_rank(raw)
    options = LaunchOptions(
        training_script=script[0], training_script_args=tuple(script[1:]), **raw
    )
    rules.check_combinations(options)
    return options


def _script_after(exc: UsageError, script: Sequence[str]) -> str:
    """An unknown option (no close match of ours) followed by what looks like the training
    script: the script's own options were put before it. The hint that says so, else "".

    --epochs 3 train.py -> "; if it is train.py's, put it after the script: python -m
    paddlike.launch [options] [--] train.py --epochs ..."
    """
    if str(exc) != f"{exc.option}: unknown option (see --help)":
        return ""  # not an unknown option, or one that looks like a misspelling of ours
    found = next(
        (a for a in script if not a.startswith("-") and (a.endswith(".py") or os.path.isfile(a))),
        None,
    )
    if found is None:
        return ""
    option = exc.option.split()[0].partition("=")[0]
    return (
        f"; if it is {found}'s, put it after the script: python -m paddlike.launch "
        f"[options] [--] {found} {option} ..."
    )


def _switch(
    raw: dict[str, object], dest: str, flag: bool | None, environ: Mapping[str, str]
) -> None:
    """A switch (store_true option) from its flag or its variables (`values.SWITCH_WORDS`)."""
    if flag is not None:
        raw[dest] = bool(flag)
        return
    found = resolve(dest, None, None, environ)
    if found is None:
        return
    text, source = found
    word = text.strip().lower()
    if word not in values.FLAG_TRUE | values.FLAG_FALSE:
        raise UsageError(
            f"{source.label(dest)}: expected {values.SWITCH_WORDS}, got {text!r}",
            f"--{dest}",
        )
    raw[dest] = word in values.FLAG_TRUE


def token_from_file(path: str, source: Source) -> str:
    """The job token read from --job_token_file's file (kept out of `ps` output and shell
    history); refused, like a loose ssh key, when others may read or write it."""
    from paddlike.launch.context.secretfile import LooseFile, read_private

    label = source.label("job_token_file")
    try:
        token = read_private(path).strip()
    except OSError as exc:
        problem = f"cannot read the token file ({exc.strerror})"
    except LooseFile as exc:
        problem = f"refused the token file: {exc}"
    else:
        if token:
            return token
        problem = "the token file is empty"
    raise UsageError(f"{label}: {problem}, got {path!r}", "--job_token_file")
