"""Headless chromium for the job page's tests and bench/logs_html.py: load a file:// page,
read the DOM its script built, take a screenshot, count its colours.

Debian's `chromium` (`make test` installs it where it can). Every run gets a fresh
profile directory and its own process group, removed and ended even when it fails or
times out; network access is off (pages come from files; host names resolve nowhere).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import struct
import subprocess
import tempfile
import zlib
from collections import Counter
from pathlib import Path

TIMEOUT = 60.0
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--hide-scrollbars",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND",
]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def unavailable_reason() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    if find_chromium() is None:
        return (
            "no chromium on PATH (make test installs Debian's chromium where it is root with apt)"
        )
    return None


def start_failure() -> str | None:
    """Why chromium cannot load a page here (it is installed but will not start, e.g. a
    container without /dev/shm), or None when it can. One short run of a blank page."""
    try:
        dom = _run(["--dump-dom", "about:blank"], timeout=30.0)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        return f"chromium does not start here: {exc}"
    return None if "<body" in dom else "chromium started but printed no page"


def _run(args: list[str], timeout: float = TIMEOUT) -> str:
    exe = find_chromium()
    assert exe is not None
    profile = tempfile.mkdtemp(prefix="paddlike-chromium-")
    proc = subprocess.Popen(
        [exe, *FLAGS, f"--user-data-dir={profile}", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        text=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"chromium exited {proc.returncode} for {args[-1]}")
        return out
    finally:
        # Its helper processes share its group: end them all, whatever happened.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


def dump_dom(page: Path, width: int = 1400, height: int = 900) -> str:
    """The DOM after the page's scripts ran (chromium --dump-dom)."""
    return dump_dom_url(page.resolve().as_uri(), width, height)


def dump_dom_url(url: str, width: int = 1400, height: int = 900) -> str:
    """dump_dom of a file:// address (with a #fragment, say)."""
    assert url.startswith("file://"), f"{url}: pages load from files only"
    return _run([f"--window-size={width},{height}", "--dump-dom", url])


def screenshot(page: Path, png: Path, width: int = 1400, height: int = 900) -> Path:
    _run([f"--window-size={width},{height}", f"--screenshot={png}", page.resolve().as_uri()])
    return png


def read_png(path: Path) -> tuple[int, int, list[tuple[int, int, int]]]:
    """(width, height, RGB pixels) of an 8-bit RGB or RGBA, non-interlaced PNG (what
    chromium writes), decoded with the standard library."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    pos, idat, width = 8, b"", 0
    height = depth = ctype = 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert depth == 8 and ctype in (2, 6), f"{path}: PNG colour type {ctype}, depth {depth}"
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    pixels: list[tuple[int, int, int]] = []
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        pixels.extend((line[i], line[i + 1], line[i + 2]) for i in range(0, stride, bpp))
        prev = line
    return width, height, pixels


def colour_counts(pixels: list[tuple[int, int, int]]) -> Counter[tuple[int, int, int]]:
    return Counter(pixels)


def near(counts: Counter[tuple[int, int, int]], rgb: tuple[int, int, int], tol: int = 12) -> int:
    """How many pixels are within `tol` of `rgb` in every channel."""
    return sum(n for c, n in counts.items() if all(abs(c[i] - rgb[i]) <= tol for i in range(3)))
