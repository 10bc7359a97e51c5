"""The launcher's command line: parsed and validated once, into one immutable record.

Where an option's value comes from — its flag, another launcher's flag, PADDLIKE_<OPTION>,
another launcher's variable (PET_*, PADDLE_*) — is one table: `sources.py`.

    record.py   LaunchOptions (the frozen record), UsageError, Source
    values.py   what each value may be: one range checker (`in_range`) and the list forms
    table.py    every option of ours: its spellings and help text, in --help's groups
    parser.py   the fast parse, argparse (what --help lists) and the split at the script
    others.py   torchrun's, Paddle's and OneFlow's options and variables: translated,
                accepted or refused with a reason (docs/migrating.md has the table)
    sources.py  the precedence of the five sources, returning each value's source
    rules.py    rules between options (elastic ranges, PS modes, device words)
    parse.py    parse_options: the steps above in order

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

from paddlike.launch.context.options.others import COMPAT_OPTIONS
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
