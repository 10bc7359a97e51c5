"""Where an option's value comes from: five sources, the first that has it wins.

    source                         example (for --master)                 kind
    1  our flag                    --master 10.0.0.1:6170 (or --master=)  FLAG
    2  another launcher's flag     --rdzv_endpoint 10.0.0.1:6170          THEIR_FLAG
    3  our variable                PADDLIKE_MASTER=10.0.0.1:6170          OUR_VARIABLE
    4  another launcher's option   PET_RDZV_ENDPOINT=10.0.0.1:6170,       THEIR_OPTION_VARIABLE
       from its variable           fleet's PADDLE_ELASTIC_SERVER
    5  another launcher's variable PET_NNODES, PADDLE_START_PORT,         THEIR_VARIABLE
       for the same option         Paddle's PADDLE_NPROC_PER_NODE
                                   (the option's row: `Option.variables`; in a launched
                                   worker not those the launcher set: PADDLE_LOG_DIR ...)

Sources 1 and 2 are both on the command line: they must agree (``--master a:1
--rdzv_endpoint b:2`` is refused, naming both). Switches (``--dry_run``) have sources 1,
3 and 5. Below all five, PaddleCloud's PADDLE_PORT with TRAINER_PORTS_NUM gives
--start_port (`others.paddlecloud_ports`); below that, the record's defaults
(`record.LaunchOptions`).

`resolve` returns the text with its `Source` as data: messages name the option as the
user gave it, which the source says (`Source.label`): our flag as typed (``--devices``,
``--max-restarts``, an abbreviation), a variable with the option it stands for
(``--nnodes (from PET_NNODES)``, ``--devices (from PADDLE_DEVICES)``: `variable_option`);
`parse_options` keeps each label in the record (`LaunchOptions.labels`) for the messages
after it. --start_port's origin is kept (`LaunchOptions.start_port_from`) from it too.
"""

from __future__ import annotations

from collections.abc import Mapping

from paddlike.contract import OPTION_ENV_PREFIX
from paddlike.launch.context.options.others import LAUNCHER_SET, PADDLECLOUD_READS, in_a_worker
from paddlike.launch.context.options.our_table import BY_DEST
from paddlike.launch.context.options.record import (
    FLAG,
    OUR_VARIABLE,
    THEIR_FLAG,
    THEIR_OPTION_VARIABLE,
    THEIR_VARIABLE,
    Source,
    UsageError,
)

PRECEDENCE = (FLAG, THEIR_FLAG, OUR_VARIABLE, THEIR_OPTION_VARIABLE, THEIR_VARIABLE)


def env_name(dest: str) -> str:
    """The environment variable of an option: log_dir -> PADDLIKE_LOG_DIR."""
    return OPTION_ENV_PREFIX + dest.upper()


def candidates(
    dest: str,
    flag: str | None,
    theirs: tuple[str, Source] | None,
    environ: Mapping[str, str],
    typed: str | None = None,
) -> list[tuple[str, Source]]:
    """Every value given for `dest`, in `PRECEDENCE` order, each with its source.

    `flag`: argparse's value (None: not on the command line), `typed` the name the user
    typed it by (``--devices``, ``--max-restarts``; `parser.typed_spellings`); `theirs`:
    another launcher's option translated to this one (`others.their_options`).
    """
    found: list[tuple[str, Source]] = []
    if flag is not None:
        found.append((flag, Source(FLAG, typed or f"--{dest}")))
    if theirs is not None and theirs[1].kind == THEIR_FLAG:
        found.append(theirs)
    if env_name(dest) in environ:
        found.append((environ[env_name(dest)], Source(OUR_VARIABLE, env_name(dest))))
    if theirs is not None and theirs[1].kind == THEIR_OPTION_VARIABLE:
        found.append(theirs)
    for var in their_variables(dest, environ):
        if var in environ:
            found.append((environ[var], Source(THEIR_VARIABLE, var, variable_option(dest, var))))
    return found


_VARIABLE_PREFIXES = ("PADDLE_", "PET_")


def variable_option(dest: str, variable: str) -> str:
    """The spelling of option `dest` that another launcher's `variable` stands for, where
    it is not --<dest>: PADDLE_DEVICES is --devices, PADDLE_RANK --rank, PET_LOCAL_ADDR
    --local_addr (each launcher's own pair); "" for the rest (PET_NNODES is --nnodes
    itself, PADDLE_ELASTIC_NP has no flag of its own)."""
    option = BY_DEST.get(dest)
    for prefix in _VARIABLE_PREFIXES:
        if variable.startswith(prefix):
            flag = "--" + variable[len(prefix) :].lower()
            if option is not None and flag != f"--{dest}" and flag in option.flags:
                return flag
    return ""


def resolve(
    dest: str,
    flag: str | None,
    theirs: tuple[str, Source] | None,
    environ: Mapping[str, str],
    typed: str | None = None,
) -> tuple[str, Source] | None:
    """The value of `dest` as text and where it came from; None when no source has it.

    Our flag and another launcher's flag for the same option must agree; when they do,
    the value is named by the other launcher's flag (``--master (from --rdzv_endpoint)``),
    which is how the user spelled the part a message is about.
    """
    found = candidates(dest, flag, theirs, environ, typed)
    if not found:
        return None
    if len(found) > 1 and found[0][1].kind == FLAG and found[1][1].kind == THEIR_FLAG:
        (ours, flag_source), (text, source) = found[0], found[1]
        if ours != text:
            raise UsageError(
                f"{flag_source.name}: {ours!r} contradicts {source.name} (which means "
                f"{flag_source.name} {text}); drop one of them",
                f"--{dest}",
            )
        return found[1]
    return found[0]


def their_variables(dest: str, environ: Mapping[str, str]) -> tuple[str, ...]:
    """Option `dest`'s other launchers' variables (its table row's) that count in `environ`:
    in a launched worker, not those the launcher set (`LAUNCHER_SET`); under PaddleCloud,
    not those it reads (`PADDLECLOUD_READS`)."""
    option = BY_DEST.get(dest)
    names = option.variables if option is not None else ()
    if in_a_worker(environ):
        names = tuple(v for v in names if v not in LAUNCHER_SET)
    if environ.get("PADDLE_TRAINERS"):
        names = tuple(v for v in names if v not in PADDLECLOUD_READS)
    return names
