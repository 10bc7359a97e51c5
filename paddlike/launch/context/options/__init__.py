"""The launcher's command line: parsed and validated once, into one immutable record.

Each option of ours is declared once, as one row of the option table, `our_table.py`
(the options of the one command that starts a cluster among them). A row
(`declare.Option`) holds the option's flags (with torchrun's, OneFlow's and DeepSpeed's
spellings), its check, its help text and group, the other launchers' variables that feed
it (PET_*, PADDLE_*), its scope (node or cluster) and the record fields it fills; the
parser, --help, the checks and the sources are read from it. Its field in `LaunchOptions`
(record.py) gives the type and the default.

    declare.py            what a row holds (`Option`)
    our_table.py          every option of ours, in --help's groups
    their_table.py        torchrun's, Paddle's, OneFlow's, DeepSpeed's options that are not
                          ours by another name: translated, accepted or refused with a reason
    record.py             LaunchOptions (the frozen record), UsageError, Source
    values.py             what each value may be: one range checker (`in_range`), the list forms
    parser.py             the fast parse, argparse (what --help lists), the split at the script
    others.py             the other launchers' options and variables, translated
    sources.py            the precedence of the five sources, returning each value's source
    console.py            --console and torchrun's -t/-r: which workers the console shows
    rules.py              rules between options (elastic ranges, PS modes, device words)
    parse.py              parse_options: the steps above in order

Every option is also read from the environment as ``PADDLIKE_<OPTION_UPPER>``
(``--log_dir`` <-> ``PADDLIKE_LOG_DIR``); a flag given on the command line wins. Every
long option may be spelled with ``-`` for ``_``. The training script and everything
after it are passed on verbatim: parsing stops at the first positional argument, so a
script's own ``--nproc_per_node`` is never read as ours.

Bad input raises `UsageError`, whose text is one line naming the option and the value,
e.g. ``--nproc_per_node: expected a positive integer, got 'x'``; the entry point prints
it after ``paddlike.launch: error:`` and exits 2.
"""

from __future__ import annotations

from paddlike.launch.context.options.parse import parse_options
from paddlike.launch.context.options.parser import build_parser
from paddlike.launch.context.options.record import (
    DEFAULT_MASTER_PORT,
    DEFAULT_START_PORT,
    PROG,
    LaunchOptions,
    UsageError,
    elastic_text,
)
from paddlike.launch.context.options.sources import env_name
from paddlike.launch.context.options.their_table import COMPAT_OPTIONS

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from paddlike.launch.context.options.record import TeeSelection as TeeSelection

__all__ = [
    "COMPAT_OPTIONS",
    "DEFAULT_MASTER_PORT",
    "DEFAULT_START_PORT",
    "PROG",
    "LaunchOptions",
    "UsageError",
    "build_parser",
    "elastic_text",
    "env_name",
    "parse_options",
]
