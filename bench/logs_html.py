"""The job page at 512 ranks: directory -> page, and the page's own drawing in chromium.

    .venv/bin/python bench/logs_html.py [--nodes 64] [--per-node 8] [--repeat 5]

A hung job of nodes × per-node ranks is written by tests/support/synthetic_job.py (summaries,
logs, progress files with flight records, a stack dump), then, alternating, in one run:

- baseline: the text reader on the same directory (`python -m paddlike.logs DIR`'s work:
  load + format_job), median of --repeat;
- the page: `python -m paddlike.logs DIR --html FILE`'s work (load + facts + render +
  write), median of --repeat; its size;
- in headless chromium: the page's script's drawing time (what it records on <body>), and
  the wall time of a whole chromium load of the page, beside chromium loading the
  small page of log_samples/failed (the same-run baseline for the browser's own cost).

Targets (issue 26): directory -> page <= 1 s; the page draws in <= 2 s; a few MB.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from paddlike.logs.page import build_page, write_atomically  # noqa: E402
from paddlike.logs.process_table import format_job  # noqa: E402
from paddlike.logs.reader import load  # noqa: E402
from tests.support import headless  # noqa: E402
from tests.support.synthetic_job import write_hung_job  # noqa: E402


def text_reader(dirs: list[str]) -> float:
    start = time.perf_counter()
    format_job(load(dirs))
    return time.perf_counter() - start


def page(dirs: list[str], target: Path) -> float:
    start = time.perf_counter()
    write_atomically(target, build_page(load(dirs), dirs))
    return time.perf_counter() - start


def in_browser(page_path: Path) -> tuple[float, float]:
    """(the script's drawing time in ms, the whole chromium run's wall time in s)."""
    start = time.perf_counter()
    dom = headless.dump_dom(page_path)
    wall = time.perf_counter() - start
    errors = re.search(r'data-errors="([^"]*)"', dom)
    if errors:
        raise RuntimeError(f"script errors in {page_path}: {errors.group(1)}")
    drawn = re.search(r'data-draw-ms="([0-9.]+)"', dom)
    if not drawn:
        raise RuntimeError(f"{page_path}: the page's script did not finish drawing")
    return float(drawn.group(1)), wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--per-node", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="paddlike-bench-html-") as tmp:
        job = write_hung_job(Path(tmp) / "log", args.nodes, args.per_node)
        dirs = [str(Path(tmp) / "log")]
        target = Path(tmp) / "job.html"
        text_times, page_times = [], []
        for _ in range(args.repeat):
            text_times.append(text_reader(dirs))
            page_times.append(page(dirs, target))
        size = target.stat().st_size
        print(f"job page, {job.world} ranks on {args.nodes} nodes (median of {args.repeat})")
        print(f"  {'measurement':<44} {'seconds':>9}")
        print(
            f"  {'baseline: text reader (load + table)':<44} {statistics.median(text_times):9.3f}"
        )
        print(
            f"  {'directory -> page (--html), target <= 1 s':<44} "
            f"{statistics.median(page_times):9.3f}"
        )
        print(f"  page size: {size / 1024:.0f} KiB")
        reason = headless.unavailable_reason()
        if reason:
            print(f"  in the browser: skipped ({reason})")
            return 0
        small = Path(tmp) / "failed.html"
        write_atomically(small, build_page(load([str(ROOT / "log_samples/failed")]), ["failed"]))
        draws, walls, small_walls = [], [], []
        for _ in range(max(1, args.repeat // 2)):
            draw_ms, wall = in_browser(target)
            draws.append(draw_ms)
            walls.append(wall)
            small_walls.append(in_browser(small)[1])
        print(f"  {'script draws the page (chromium), target <= 2 s':<44} "
              f"{statistics.median(draws) / 1000:9.3f}")  # fmt: skip
        print(
            f"  {'chromium loads the 512-rank page, whole run':<44} {statistics.median(walls):9.3f}"
        )
        print(
            f"  {'baseline: chromium loads a 2-rank page':<44} "
            f"{statistics.median(small_walls):9.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
