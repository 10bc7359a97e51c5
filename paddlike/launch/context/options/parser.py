"""The options of ours (`our_table`): what --help lists, the fast parse, the split at the
training script.

`our_table.GROUPS` is the table. A launch reads its options with `parse_ours` (no argparse: its
import and the building of the parser were an eighth of a launch's start-up); argparse is
built from the same table only for --help and for anything the fast parse does not take
as plainly correct, so that every error and the help text are argparse's own. Values come
back as text: `values` checks them, `sources` decides which one counts.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

import paddlike
from paddlike.commands import command_name
from paddlike.contract import OPTION_ENV_PREFIX
from paddlike.launch.context.options.others import normalize_spelling
from paddlike.launch.context.options.our_table import COMMON, DEST, GROUPS, OPTIONS, SWITCHES
from paddlike.launch.context.options.record import UsageError
from paddlike.launch.context.options.their_table import (
    BOOL_TRUE,
    COMPAT_OPTIONS,
    COMPAT_VALUED,
    PADDLE_BOOL,
    TORCHRUN_HELP,
    dest_of,
)

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    import argparse

_SWITCHES = frozenset(s for s, dest in DEST.items() if dest in SWITCHES)
_KNOWN = frozenset(DEST) | {"-h", "--help", "--version"} | {"--" + name for name in COMPAT_OPTIONS}
_TAKES_VALUE = (
    frozenset(s for s in DEST if s not in _SWITCHES)
    | {"--" + name for name in COMPAT_VALUED}
    | {"-r", "-t"}
)


# options whose value is itself options of another tool, so may start with "-":
# ``--ssh_args "-i key"`` (argparse would take "-i" for --include)
DASH_VALUES = frozenset(option.dest for option in OPTIONS if option.dash_value)


def parse_ours(ours: Sequence[str]) -> dict[str, object]:
    """Our options (`split_argv`'s part, the other launchers' taken out) -> {dest: text,
    or True for a switch}; the last of a repeated option wins, as in argparse.

    Only plainly correct arguments are read here: an option of ours with a value that
    does not start with "-" (any value for `DASH_VALUES`; or ``--name=value``), or a
    switch. Anything else (--help, an unknown option, a missing value, ``--switch=1``) goes
    to argparse, which prints the help or raises the `UsageError` it always did.
    """
    given: dict[str, object] = {}
    i, n = 0, len(ours)
    while i < n:
        arg = ours[i]
        if arg in _SWITCHES:
            given[DEST[arg]] = True
            i += 1
        elif arg in DEST and i + 1 < n and (
            not ours[i + 1].startswith("-") or DEST[arg] in DASH_VALUES
        ):
            given[DEST[arg]] = ours[i + 1]
            i += 2
        else:
            name, eq, text = arg.partition("=")
            if not (eq and name.startswith("--") and name in DEST and name not in _SWITCHES):
                return vars(build_parser().parse_args(ours))
            given[DEST[name]] = text
            i += 1
    return given


def build_parser() -> argparse.ArgumentParser:
    """argparse from the option table (`our_table.GROUPS`): --help's text, and the parse of
    what `parse_ours` does not take; its errors become `UsageError` (one line, no usage
    dump)."""
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> None:  # type: ignore[override]
            # argparse's wording, reshaped to ours: "--ips: expected one argument".
            if message.startswith("unrecognized arguments: "):
                unknown = message.split(": ", 1)[1]
                raise UsageError(f"{unknown}: unknown option{_did_you_mean(unknown)}", unknown)
            if message.startswith("argument "):
                message = message[len("argument ") :]
            raise UsageError(message)

    def formatter(prog: str) -> argparse.HelpFormatter:
        # An explicit width keeps argparse from importing shutil (and with it bz2,
        # lzma, zlib): ~5 ms of every launch, spent only to format --help.
        try:
            columns = int(os.environ.get("COLUMNS", "")) or os.get_terminal_size().columns
        except (ValueError, OSError):
            columns = 80
        return _Formatter(prog, width=max(columns - 2, 40))

    class _Formatter(argparse.HelpFormatter):
        def _format_action_invocation(self, action: argparse.Action) -> str:
            # "--gpus, --devices, --selected_gpus GPUS": the value once, not per spelling
            if not action.option_strings or action.nargs == 0:
                return super()._format_action_invocation(action)
            metavar = self._metavar_formatter(action, action.dest.upper())(1)[0]
            return f"{', '.join(action.option_strings)} {metavar}"

    p = Parser(
        prog=command_name(sys.argv[0], "paddlike.launch"),  # what the user typed
        # one line: the options are listed below, the common ones first
        usage="%(prog)s [options] training_script [training_script_args ...]",
        formatter_class=formatter,
        description=(
            "Start a distributed training job: one worker per device (or "
            "--nproc_per_node CPU workers) on each node. Every option may also be set as "
            f"{OPTION_ENV_PREFIX}<OPTION> (e.g. {OPTION_ENV_PREFIX}LOG_DIR; the flag wins), "
            "spelled with - for _, or abbreviated, as in torchrun (docs/cli.md)."
        ),
        allow_abbrev=False,
    )
    for title, rows in GROUPS:
        g = p.add_argument_group(title)
        for option in rows:
            if option.switch:
                g.add_argument(*option.flags, action="store_true", default=None, help=option.help)
            else:
                g.add_argument(*option.flags, dest=option.dest, help=option.help)
        if title == COMMON:
            g.add_argument(
                "--version",
                action="version",
                version=f"%(prog)s (paddlike {paddlike.__version__})",
                help="print the version and exit",
            )
    g = p.add_argument_group("torchrun's options")
    for spellings, text in TORCHRUN_HELP:
        name = "torchrun_" + dest_of(spellings)
        if spellings == ("--standalone",):
            g.add_argument(*spellings, dest=name, action="store_true", help=text)
        else:
            g.add_argument(*spellings, dest=name, metavar=dest_of(spellings).upper(), help=text)
    # Parsed by `split_argv`, never by argparse; declared here for --help.
    p.add_argument("training_script", nargs="?", help="the script (or module, or command) to run")
    p.add_argument("training_script_args", nargs=argparse.REMAINDER)
    return p


def _did_you_mean(unknown: str) -> str:
    """The tail of an unknown option's message: "; did you mean --nproc_per_node?" for a
    misspelt long option (--nprocs_per_node), and the pointer to --help."""
    import difflib

    name = unknown.split()[0].partition("=")[0]
    if len(name) > 2:  # a long option, or one given a single dash (-nproc_per_node)
        words = {s[2:]: s for s in _LONG}  # compared without the dashes: --np is not --nope
        word = name.lstrip("-").replace("-", "_")
        close = difflib.get_close_matches(word, words, n=1, cutoff=0.8)
        if close:
            return f"; did you mean {words[close[0]]}? (see --help)"
    return " (see --help)"


# the long options a prefix may stand for (underscore spellings: dashes are normalized)
_LONG = sorted(s for s in _KNOWN if s.startswith("--") and "-" not in s[2:])


def _unabbreviated(arg: str) -> str:
    """An unambiguous prefix of a long option, as argparse accepts it for torchrun
    (``--nproc_per_nod 2``, ``--rdzv-endp=h:p``), as the whole option; an exact name or
    anything else is returned as it is. A prefix of two options is a `UsageError`."""
    name, sep, value = arg.partition("=")
    if not name.startswith("--") or name in _KNOWN or len(name) < 3:
        return arg
    under = "--" + name[2:].replace("-", "_")
    matches = [s for s in _LONG if s.startswith(under)]
    options = {DEST.get(s, s) for s in matches}  # aliases of one option are one option
    if len(options) > 1:
        raise UsageError(f"{name}: ambiguous abbreviation, could be {', '.join(matches)}", name)
    if not matches:
        return arg
    return "--" + DEST[matches[0]] + sep + value if matches[0] in DEST else matches[0] + sep + value


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split at the training script: launcher options before it, the script's argv after.

    argparse alone would still look at the script's arguments for option prefixes;
    splitting first guarantees they are passed on untouched. The launcher's part comes
    back with torchrun's dash spellings rewritten to ours (`normalize_spelling`),
    unambiguous abbreviations written out (`_unabbreviated`), and Paddle's
    ``--log_overwrite True|False`` (a value, where ours is a switch) folded.
    """
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = _unabbreviated(normalize_spelling(argv[i], _KNOWN))
        if arg == "--":
            return out, list(argv[i + 1 :])
        if not arg.startswith("-") or arg == "-":
            return out, list(argv[i:])
        name, sep, value = arg.partition("=")
        if name == "--log_overwrite":
            if not sep and i + 1 < len(argv) and argv[i + 1].lower() in PADDLE_BOOL:
                sep, value = "=", argv[i + 1]
                i += 1
            if sep:
                if value.lower() not in PADDLE_BOOL:
                    raise UsageError(
                        f"--log_overwrite: expected no value, or true/false as in Paddle's "
                        f"launcher, got {value!r}",
                        "--log_overwrite",
                    )
                if value.lower() in BOOL_TRUE:
                    out.append(name)
                i += 1
                continue
        out.append(arg)
        if arg in _TAKES_VALUE:
            if i + 1 < len(argv):
                out.append(argv[i + 1])
            i += 2
        else:
            i += 1
    return out, []


def typed_spellings(names: Mapping[str, str]) -> dict[str, str]:
    """{dest: the option's name as the user typed it}, from `typed_names`: messages name
    ``--devices`` as --devices, ``--max-restarts`` with its dashes, ``--rank`` as --rank
    and an abbreviation (``--local_rank`` for --local_ranks_filter) as typed; the last
    spelling of an option wins, as its value does."""
    return {DEST[full]: name for full, name in names.items() if full in DEST}


def typed_names(launcher_argv: Sequence[str]) -> dict[str, str]:
    """{an option's name as `split_argv` writes it (underscores, written out): the name
    the user typed}, ours and the other launchers' (``--rdzv_backend``: ``--rdzv-backend``)."""
    typed: dict[str, str] = {}
    for arg in launcher_argv:
        name = arg.partition("=")[0]
        if not name.startswith("-"):
            continue
        try:
            full = _unabbreviated(normalize_spelling(name, _KNOWN))
        except UsageError:
            continue
        if full in _KNOWN:
            typed[full] = name
    return typed
