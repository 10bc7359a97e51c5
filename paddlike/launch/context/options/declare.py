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

from paddlike.launch import NamedTuple

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable

    from paddlike.launch.context.options.record import Source

NODE = "node"  # every host's launcher reads it (the one command passes it on)
CLUSTER = "cluster"  # the one command that starts the hosts' launchers keeps it


class Option(NamedTuple):
    """One option of ours. Its dest (field, PADDLIKE_<DEST>) is its first long flag without
    the dashes (argparse's rule)."""

    flags: tuple[str, ...]  # ours, with torchrun's, OneFlow's, DeepSpeed's aliases
    help: str  # --help's text (docs/cli.md's tables are checked against it)
    # text -> value, or `values.BadValue` saying what was expected; None: a switch
    # (store_true), whose variables hold the words of `values.SWITCH_WORDS`
    check: Callable[[str], object] | None
    # other launchers' variables for the same option, read in this order below our flag,
    # another launcher's flag and PADDLIKE_<DEST> (`sources.PRECEDENCE`)
    variables: tuple[str, ...] = ()
    # what else a value may be, said after a bad value's message: text, or text -> text
    hint: str | Callable[[str], str] = ""
    scope: str = NODE  # NODE or CLUSTER (kept by the one command, never passed to a host)
    secret: bool = False  # never in any argv: the one command passes it in the environment
    dash_value: bool = False  # a value may start with "-" (it is another tool's options)
    implies: str = ""  # the --run_mode that giving it implies ("ps", "ps-heter"), if any
    # where the checked value goes: (value, its source) -> {field: value}; None: its field
    into: Callable[[object, Source], dict[str, object]] | None = None

    @property
    def dest(self) -> str:
        return next(s for s in self.flags if s.startswith("--"))[2:]

    @property
    def switch(self) -> bool:
        return self.check is None

    def hint_for(self, text: str) -> str:
        return self.hint(text) if callable(self.hint) else self.hint

    def fields_of(self, value: object, source: Source) -> dict[str, object]:
        """The record's fields a checked value gives (`into`, or its own field)."""
        return {self.dest: value} if self.into is None else self.into(value, source)
