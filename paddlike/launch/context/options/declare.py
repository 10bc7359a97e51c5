"""What declaring an option says: `Option`, one row of the option table (`our_table`).

An option is declared once, as one `Option` in `our_table.py`; everything else reads the
row:

    the fast parse, argparse, --help   flags, help, the group it is listed in   (parser)
    the value's check                  check, hint                              (parse)
    the run mode it implies            implies                                  (rules)
    where a value comes from           flags, PADDLIKE_<DEST>, variables        (sources)
    the record's fields it fills       its own field, or `into`'s               (parse)
    what the cluster's starter keeps   scope, secret                 (cluster/picks.py)

The field itself (its type and its default: the value when no source gives one) is the
option's field of `record.LaunchOptions`, the record every stage reads (it is a leaf module
that the whole launcher imports; tests/launch/context/options/test_table.py checks that
every row has its field). Adding an option is one row, its field, and its use where the
job needs it. Rules between several
options stay in `rules.py`; other launchers' options that are not ours by another name
are `their_table.py`'s.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable

    from paddlike.launch.context.options.record import Source

NODE = "node"  # every host's launcher reads it (the one command passes it on)
CLUSTER = "cluster"  # the one command that starts the hosts' launchers keeps it


class Option:
    """One option of ours. Its dest (field, PADDLIKE_<DEST>) is its first long flag without
    the dashes (argparse's rule). A plain class: the table's rows are made at every
    launch's start, and keyword arguments bound by the interpreter cost least there."""

    __slots__ = (
        "check", "dash_value", "dest", "flags", "help", "hint", "implies", "into", "scope",
        "secret", "switch", "variables",
    )  # fmt: skip

    def __init__(
        self,
        flags: tuple[str, ...],
        help: str,
        check: Callable[[str], object] | None,
        *,
        variables: tuple[str, ...] = (),
        hint: str | Callable[[str], str] = "",
        scope: str = NODE,
        secret: bool = False,
        dash_value: bool = False,
        implies: str = "",
        into: Callable[[object, Source], dict[str, object]] | None = None,
    ) -> None:
        self.flags = flags  # ours, with torchrun's, OneFlow's, DeepSpeed's aliases
        self.help = help  # --help's text (docs/cli.md's tables are checked against it)
        # text -> value, or `values.BadValue` saying what was expected; None: a switch
        # (store_true), whose variables hold the words of `values.SWITCH_WORDS`
        self.check = check
        # other launchers' variables for the same option, read in this order below our
        # flag, another launcher's flag and PADDLIKE_<DEST> (`sources.PRECEDENCE`)
        self.variables = variables
        # what else a value may be, said after a bad value's message: text, or text -> text
        self.hint = hint
        self.scope = scope  # NODE or CLUSTER (kept by the one command, never passed on)
        self.secret = secret  # never in any argv: the one command passes it in the environment
        self.dash_value = dash_value  # a value may start with "-" (another tool's options)
        self.implies = implies  # the --run_mode giving it implies ("ps", "ps-heter"), if any
        # where the checked value goes: (value, its source) -> {field: value}; None: its field
        self.into = into
        self.dest = next(s for s in flags if s.startswith("--"))[2:]
        self.switch = check is None

    def __repr__(self) -> str:
        return f"Option({self.flags!r}, ...)"

    def hint_for(self, text: str) -> str:
        return self.hint(text) if callable(self.hint) else self.hint

    def fields_of(self, value: object, source: Source) -> dict[str, object]:
        """The record's fields a checked value gives (`into`, or its own field)."""
        return {self.dest: value} if self.into is None else self.into(value, source)
