"""The job page's heat map of lateness (issue 37) in a real browser (headless chromium):
a row per rank, a column per collective of node 0's last --straggler_check, coloured by
how late the rank entered it. The straggler's row is the hottest and says so; a balanced
job's map is calm; a job without the check has no map. Each page is made from
log_samples/success with four ranks and a "stragglers" entry as the launcher's check
writes it (`lateness.find_stragglers` over arrivals 70 ms apart)."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from paddlike.logs.lateness import Arrival, find_stragglers
from paddlike.summary import read_summary, write_summary
from tests.logs.test_page_browser import SAMPLES, Element, Tree, make_page, open_page
from tests.support import headless

REASON = headless.unavailable_reason()
pytestmark = [
    pytest.mark.skipif(REASON is not None, reason=REASON or ""),
    pytest.mark.xdist_group("chromium"),  # one browser at a time on this machine
    pytest.mark.timeout(120),
]
RANKS = 4


@pytest.fixture(autouse=True, scope="module")
def chromium_starts() -> None:
    reason = headless.start_failure()
    if reason:
        pytest.skip(reason)


def checked_job(log: Path, late: dict[int, float]) -> Path:
    """log_samples/success as a 4-rank job whose node 0 kept a straggler check: ranks in
    `late` enter each of 300 all_reduces that many seconds after the others."""
    shutil.copytree(SAMPLES / "success", log)
    summary = read_summary(log)
    assert summary is not None
    first = summary.processes[0]
    for r in range(2, RANKS):
        shutil.copy(log / "workerlog.1", log / f"workerlog.{r}")
    summary.processes = [
        first.replace(rank=r, local_index=r, log_file=f"workerlog.{r}") for r in range(RANKS)
    ]
    rnd = random.Random(3)
    start = summary.start_time
    arrivals = {
        r: [
            Arrival("torch:0", k, "all_reduce",
                    start + 0.2 + 0.07 * k + late.get(r, 0.0) + rnd.uniform(0, 0.0008))
            for k in range(1, 301)
        ]
        for r in range(RANKS)
    }  # fmt: skip
    found = find_stragglers(
        arrivals, dict.fromkeys(range(RANKS), summary.hostname),
        {r: f"workerlog.{r}" for r in range(RANKS)},
    )  # fmt: skip
    summary.stragglers = {"time": start + 21.0, "check": 3, "since": 1, **found.to_json()}
    write_summary(log, summary)
    return log


def heat_rows(tree: Tree) -> dict[int, Element]:
    return {int(g.attrs["data-rank"]): g for g in tree.find("heat-row")}


def heat(row: Element) -> float:
    """A row's colour level (0 calm .. 8 hottest), averaged over its collectives."""
    cells = [(int(e.attrs["data-level"]), int(e.attrs["data-cols"])) for e in row.walk()
             if "cell" in e.classes]  # fmt: skip
    return sum(lv * n for lv, n in cells) / sum(n for _, n in cells)


def test_the_heat_map_shows_every_rank_the_stragglers_row_hottest_and_named(tmp_path):
    log = checked_job(tmp_path / "log", {2: 0.05})
    tree = open_page(make_page([log], tmp_path / "job.html"))
    [section] = tree.find(id_="lateness")
    assert "hidden" not in section.attrs
    shown = heat_rows(tree)
    assert sorted(shown) == [0, 1, 2, 3]
    levels = {r: heat(g) for r, g in shown.items()}
    assert max(levels, key=levels.get) == 2 and levels[2] == 8  # burns: 50 ms, the bar 7 ms
    assert all(levels[r] < 1 for r in (0, 1, 3)), levels
    assert [r for r, g in shown.items() if "straggler" in g.classes] == [2]
    host = read_summary(log).hostname
    label = next(e for e in shown[2].walk() if "heat-label" in e.classes).all_text()
    assert label == f"▶ rank 2 · node {host}"
    side = next(e for e in shown[2].walk() if "heat-side" in e.classes).all_text()
    assert side.startswith("straggler +50 ms, last 100%")
    [svg] = tree.find(id_="lateness-svg")
    assert "200 collectives every rank of their group entered" in svg.all_text()
    [note] = tree.find(id_="lateness-note")
    assert "check #3 at +21.0 s" in note.all_text()
    assert "No straggler" not in note.all_text()


def test_a_balanced_jobs_heat_map_is_calm_and_names_nobody(tmp_path):
    log = checked_job(tmp_path / "log", {})
    tree = open_page(make_page([log], tmp_path / "job.html"))
    shown = heat_rows(tree)
    assert sorted(shown) == [0, 1, 2, 3]
    assert all(heat(g) == 0 for g in shown.values())
    assert not [g for g in shown.values() if "straggler" in g.classes]
    assert "No straggler" in tree.find(id_="lateness-note")[0].all_text()


def test_a_job_without_a_straggler_check_has_no_heat_map(tmp_path):
    tree = open_page(make_page([SAMPLES / "success"], tmp_path / "job.html"))
    [section] = tree.find(id_="lateness")
    assert "hidden" in section.attrs and not tree.find("heat-row")


def test_the_heat_maps_screenshot_has_the_stragglers_row_dark_red(tmp_path):
    page = make_page([checked_job(tmp_path / "log", {2: 0.05})], tmp_path / "job.html")
    _, _, pixels = headless.read_png(headless.screenshot(page, tmp_path / "h.png", 1400, 1000))
    counts = headless.colour_counts(pixels)
    assert headless.near(counts, (0x70, 0x12, 0x14)) > 3000  # rank 2's 200 cells
