"""Find the line of a log that says why a process failed.

A log is scanned once, top to bottom, and the first error wins: the last line of a
Python traceback (following chained exceptions to the one that ended the process),
the summary line of a Paddle C++ error block, an NCCL error, an out-of-memory error,
the kernel OOM killer's message, a shell's "Killed", a segfault. Streaming, so a
gigabyte log costs one pass and constant memory.

    lines                                              first_error_line
    ["Traceback (most recent call last):",             "ValueError: bad shape"
     '  File "t.py", line 3, in <module>',
     "ValueError: bad shape"]
    ["NCCL WARN Connect to 10.0.0.2<4242> failed"]     "NCCL WARN Connect to ... failed"
    ["Killed"]                                         "Killed"
    ["epoch 1 loss 0.3"]                               None
    ["[rank1]: Traceback (most recent call last):",    "RuntimeError: boom"
     '[rank1]:   File "ddp.py", line 39, in <module>',
     "[rank1]: RuntimeError: boom"]

torch (2.2 and later) writes every line of a rank's uncaught exception behind its
rank, `[rank1]: `; torchrun's `--tee`/`--role` and pdsh put their own label in front.
Whatever stands before "Traceback (most recent call last):" (other than blanks) is
that traceback's prefix when its first frame repeats it: it is taken off each of its
lines (lines without it, another thread's output interleaved, are passed over), and
the error line is reported without it. A bare `[label]: ` tag is taken off a lone
error line too (a tail that starts mid-traceback).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from paddlike.logformat import open_regular

TYPE_CHECKING = False  # typing's, without importing typing (the launcher reads this)
if TYPE_CHECKING:
    from typing import BinaryIO

TRACEBACK_START = "Traceback (most recent call last):"
# Lines between two tracebacks of one chained exception.
_CHAIN_LINES = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)
# Paddle's C++ errors end with this block; the next non-rule line names the error.
_PADDLE_SUMMARY = "Error Message Summary:"

# A label in front of a line: torch's "[rank1]: ", torchrun's "[default0]:".
_TAG = re.compile(r"^\[[\w .:/@-]{1,64}\]:\s?")

# One line, on its own, that names an error (its tag taken off). Order does not matter:
# the first matching line of the log wins.
_ERROR_LINE = re.compile(
    r"""
      \bNCCL\ (?:error|WARN)\b              # NCCL's own messages
    | \bnccl(?:SystemError|InternalError|InvalidUsage|UnhandledCudaError|RemoteError)\b
    | \bCUDA\ out\ of\ memory\b
    | \bout\ of\ memory\b.*\bkill(?:ed)?\b  # "Out of memory: Killed process 1234 (python)"
    | \boom[-_]kill                         # "oom-kill:constraint=..." from the kernel log
    | ^\s*Killed\s*$                        # a shell reporting its child's SIGKILL
    | \bSegmentation\ fault\b
    | ^Fatal\ Python\ error:
    | \bcore\ dumped\b
    | ^[A-Za-z_][\w.]*(?:Error|Exception):\ \S  # "ValueError: ..." without its traceback
    """,
    re.VERBOSE | re.IGNORECASE,
)


class _TracebackScanner:
    """Follows one (possibly chained) traceback whose lines start with `prefix` (what
    stood before its first line); `.result` is its last exception line."""

    def __init__(self, prefix: str = "") -> None:
        self.result: str | None = None
        self.done = False
        self._awaiting_chain = False  # just saw the exception line; a chain may follow
        self._in_frames = True
        self._prefix = prefix if prefix.strip() else ""  # indentation is no writer's label
        self._prefix_checked = not self._prefix

    def feed(self, line: str) -> None:
        if not self._prefix_checked and line.strip():
            # A prefix that the first frame does not repeat was a message's ("ERROR oops
            # Traceback ..." from logging): the frames that follow are bare.
            self._prefix_checked = True
            if not line.startswith(self._prefix):
                self._prefix = ""
        if self._prefix:
            if line.startswith(self._prefix):
                line = line[len(self._prefix) :]
            elif line.rstrip() == self._prefix.rstrip():
                line = ""  # its blank line ("[rank1]:")
            else:
                return  # another writer's line, interleaved
        stripped = line.strip()
        if self._awaiting_chain:
            if not stripped:
                return
            if stripped in _CHAIN_LINES:
                return
            if stripped == TRACEBACK_START:
                self._awaiting_chain = False
                self._in_frames = True
                return
            self.done = True
            return
        if self._in_frames:
            # Frames are indented ("  File ...", "    code", "    ^^^^");
            # the exception line is the first one that is not.
            if not stripped or line[:1] in (" ", "\t"):
                return
            self.result = stripped
            self._in_frames = False
            self._awaiting_chain = True


def first_error_line(lines: Iterable[str]) -> str | None:
    """The first line of `lines` that says why the process failed, or None."""
    scanner: _TracebackScanner | None = None
    paddle_block = False
    for raw in lines:
        line = raw.rstrip("\r\n")
        if scanner is not None:
            scanner.feed(line)
            if scanner.done:
                return scanner.result
            continue
        stripped = line.strip()
        if paddle_block:
            if stripped and set(stripped) != {"-"}:
                return stripped
            continue
        if stripped.endswith(TRACEBACK_START):
            scanner = _TracebackScanner(line[: line.rindex(TRACEBACK_START)])
            continue
        if stripped == _PADDLE_SUMMARY:
            paddle_block = True
            continue
        untagged = _TAG.sub("", line, count=1)
        if _ERROR_LINE.search(untagged):
            return untagged.strip()
    if scanner is not None:
        return scanner.result  # the log ended right after the traceback (the usual case)
    return None


def first_error_in_file(path: str, *, start: int = 0, limit: int = 256 << 20) -> str | None:
    """`first_error_line` of a file from byte offset `start`, reading at most `limit` bytes.

    A missing or unreadable file has no error line (the reader reports the file
    itself). Undecodable bytes are replaced, never fatal.
    """
    try:  # a regular file only: a FIFO another user put there would block the reader
        with open(open_regular(path, os.O_RDONLY), "rb") as f:
            f.seek(start)
            return first_error_line(_decoded_lines(f, limit))
    except OSError:
        return None


def _decoded_lines(f: BinaryIO, limit: int) -> Iterable[str]:
    read = 0
    for chunk in f:
        read += len(chunk)
        if read > limit:
            return
        yield chunk.decode("utf-8", errors="replace")
