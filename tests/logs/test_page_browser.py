"""The job page in a real browser (headless chromium): what a person opening it sees.

Each page is made from a real log directory — log_samples/ (written by paddlike's own
launcher: a failed, a restarted, a hung and a PS job) or one written like a launcher
would (tests/support/synthetic_job.py: an elastic job that lost a node, a hung job with
progress files, 512 ranks, a Paddle-written directory) — then loaded from its file by
chromium. The checks read the DOM the page's script built (rows, marks, the detail
panel, script errors) and a screenshot's size and colours. Skipped, with the reason,
where there is no chromium.
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest

from paddlike.logs.__main__ import main
from tests.support import headless
from tests.support.synthetic_job import (
    write_elastic_job,
    write_hung_job,
    write_paddle_job,
    write_running_job,
    write_torch_hang,
)

SAMPLES = Path(__file__).resolve().parents[2] / "log_samples"
REASON = headless.unavailable_reason()
pytestmark = [
    pytest.mark.skipif(REASON is not None, reason=REASON or ""),
    pytest.mark.xdist_group("chromium"),  # one browser at a time on this machine
]
RED, AMBER, GREEN, PURPLE = (
    (0xD4, 0x3C, 0x3C),
    (0xE3, 0xA2, 0x1A),
    (0x2E, 0x9D, 0x57),
    (0x7A, 0x3F, 0xB0),
)


@pytest.fixture(autouse=True, scope="module")
def chromium_starts() -> None:
    reason = headless.start_failure()
    if reason:
        pytest.skip(reason)


class Element:
    def __init__(self, tag: str, attrs: dict[str, str]) -> None:
        self.tag, self.attrs, self.children, self.text = tag, attrs, [], ""

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def all_text(self) -> str:
        return self.text + "".join(c.all_text() for c in self.children)

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()


class Tree(HTMLParser):
    """The dumped DOM as a tree (enough of one for these checks)."""

    VOID = frozenset({"meta", "br", "img", "input", "link", "hr"})

    def __init__(self, text: str) -> None:
        super().__init__()
        self.root = Element("root", {})
        self.stack = [self.root]
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        el = Element(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(el)
        if tag not in self.VOID:
            self.stack.append(el)

    def handle_startendtag(self, tag, attrs):
        self.stack[-1].children.append(Element(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data):
        self.stack[-1].text += data

    def find(self, cls: str | None = None, id_: str | None = None) -> list[Element]:
        return [
            e
            for e in self.root.walk()
            if (cls is None or cls in e.classes) and (id_ is None or e.attrs.get("id") == id_)
        ]


def make_page(dirs: list[Path], target: Path) -> Path:
    assert main([*(str(d) for d in dirs), "--html", str(target)]) == 0  # written
    assert target.is_file()
    return target


def open_page(page: Path, width: int = 1400, height: int = 900) -> Tree:
    tree = Tree(headless.dump_dom(page, width, height))
    html = next(e for e in tree.root.walk() if e.tag == "html")
    assert "data-errors" not in html.attrs, f"script errors: {html.attrs.get('data-errors')}"
    body = next(e for e in tree.root.walk() if e.tag == "body")
    assert body.attrs.get("data-drawn") == "1", "the page's script did not finish drawing"
    return tree


def rows(tree: Tree) -> dict[str, Element]:
    """The process rows of the timeline by their label ('trainer 1')."""
    out = {}
    for g in tree.find("proc"):
        label = next(e for e in g.walk() if "label" in e.classes)
        out[label.text.strip()] = g
    return out


def test_failed_job_shows_both_ranks_the_failed_one_marked_and_its_error(tmp_path):
    tree = open_page(make_page([SAMPLES / "failed"], tmp_path / "failed.html"))
    shown = rows(tree)
    assert set(shown) == {"trainer 0", "trainer 1"}
    assert {"status-failed", "cause", "selected"} <= shown["trainer 1"].classes
    assert (
        "status-killed" in shown["trainer 0"].classes and "cause" not in shown["trainer 0"].classes
    )
    assert any("first to fail" in e.all_text() for e in tree.find("cause-label"))
    assert any("root cause at" in e.all_text() for e in tree.find("cause-line"))
    [report] = tree.find(id_="report")
    assert report.all_text().startswith("FAILED: trainer rank 1 exited with code 3")
    [detail] = tree.find(id_="detail")
    text = detail.all_text()
    assert "RuntimeError: rank 1 cannot read shard data/part-00001" in text
    assert "log_samples/scripts/train.py" in text  # the command
    assert "workerlog.1" in text


def test_the_failed_bars_mark_stands_beside_its_end_and_the_label_after_it(tmp_path):
    tree = open_page(make_page([SAMPLES / "failed"], tmp_path / "failed.html"))
    row = rows(tree)["trainer 1"]
    bar = next(e for e in row.walk() if "bar" in e.classes)
    circle = next(
        e for x in row.walk() if "xmark" in x.classes for e in x.walk() if e.tag == "circle"
    )
    label = next(e for e in row.walk() if "cause-label" in e.classes)
    end = float(bar.attrs["x"]) + float(bar.attrs["width"])
    cx = float(circle.attrs["cx"])
    assert cx - 6 >= end + 2  # the whole mark (r=6) past the bar and its ring
    assert float(label.attrs["x"]) >= cx + 8  # the label after the mark, not under it


def test_failed_job_screenshot_is_the_window_with_the_failure_in_red(tmp_path):
    page = make_page([SAMPLES / "failed"], tmp_path / "failed.html")
    width, height, pixels = headless.read_png(
        headless.screenshot(page, tmp_path / "f.png", 1200, 800)
    )
    assert (width, height) == (1200, 800)
    counts = headless.colour_counts(pixels)
    assert headless.near(counts, RED) > 2000  # the failed bar, badge, report border
    assert headless.near(counts, AMBER) > 2000  # the killed rank's bar
    assert headless.near(counts, GREEN) < 300  # nothing succeeded: the legend's swatch only
    assert len(counts) > 200  # text and shapes, not a blank page


def test_restarted_job_shows_the_earlier_run_of_each_rank_and_the_restart_band(tmp_path):
    tree = open_page(make_page([SAMPLES / "restarted"], tmp_path / "restarted.html"))
    shown = rows(tree)
    assert set(shown) == {"trainer 0", "trainer 1"}
    for g in shown.values():
        assert "status-ok" in g.classes
        assert [e for e in g.walk() if "earlier" in e.classes], "the first run is drawn"
    bands = [e.attrs["data-label"] for e in tree.find("band")]
    assert bands == ["first run", "restart 1"]
    assert tree.find(id_="report")[0].all_text().startswith("OK: 2 workers finished")


def test_elastic_job_shows_its_rounds_and_the_node_it_lost(tmp_path):
    write_elastic_job(tmp_path / "log")
    tree = open_page(make_page([tmp_path / "log"], tmp_path / "elastic.html"))
    assert set(rows(tree)) == {"trainer 0", "trainer 1", "trainer 2", "trainer 3"}
    bands = [e.all_text() for e in tree.find("band")]
    assert bands == ["round 1 · 3 nodes", "round 2 · 2 nodes"]
    [lost] = tree.find("membership")
    assert "node lost" in lost.all_text() and "stopped sending heartbeats" in lost.all_text()


def test_real_elastic_job_shows_the_lost_node_between_its_two_rounds(tmp_path):
    tree = open_page(make_page([SAMPLES / "elastic_lost"], tmp_path / "elastic_lost.html"))
    shown = rows(tree)
    assert len(shown) == 3
    statuses = sorted(next(iter(g.classes & {"status-ok", "status-gone"})) for g in shown.values())
    assert statuses == ["status-gone", "status-ok", "status-ok"]
    bands = [e.all_text() for e in tree.find("band")]
    assert [b.split(" · ")[1] for b in bands] == ["3 nodes", "2 nodes"]
    [lost] = tree.find("membership")
    assert "node lost" in lost.all_text() and "stopped sending heartbeats" in lost.all_text()
    assert tree.find("unknown-end"), "the lost node's bar ends at its last output, marked ?"


def test_hung_sample_marks_the_stack_dump_and_the_rank_that_stopped(tmp_path):
    tree = open_page(make_page([SAMPLES / "hung"], tmp_path / "hung.html"))
    shown = rows(tree)
    assert set(shown) == {"trainer 0", "trainer 1", "trainer 2"}
    assert "hung-odd" in shown["trainer 2"].classes
    assert not any("hung-odd" in shown[n].classes for n in ("trainer 0", "trainer 1"))
    [dump] = tree.find("dump")
    assert "stacks taken (rank 2)" in dump.all_text()
    [dumps] = tree.find(id_="dump-list")
    assert "is in `load_batch`" in dumps.all_text()


def test_a_torch_hang_marks_each_ranks_last_collective_and_the_rank_that_stopped_first(tmp_path):
    # Three bars killed at the same moment; what sets them apart is each rank's last
    # collective (torch's flight record): rank 2 entered its last one 3 s before the others.
    report = ["no single rank stands out", "ranks 0–2 (3 of 3) wait in `all_reduce`"]
    write_torch_hang(tmp_path / "log", SAMPLES, last={0: 10.0, 1: 10.0, 2: 7.0}, summary=report)
    shown = rows(open_page(make_page([tmp_path / "log"], tmp_path / "torch.html")))
    ticks = {name: [e for e in g.walk() if "last-life" in e.classes] for name, g in shown.items()}
    assert {name: len(t) for name, t in ticks.items()} == {f"trainer {r}": 1 for r in range(3)}
    assert [n for n, (t,) in ticks.items() if "first" in t.classes] == ["trainer 2"]
    assert "last sign of life: barrier #5 (running) at +" in ticks["trainer 1"][0].all_text()
    assert "stopped first" in shown["trainer 2"].all_text()
    assert "stopped first" not in shown["trainer 0"].all_text()
    x = {n: float(t.attrs["d"][1:].split()[0]) for n, (t,) in ticks.items()}
    assert x["trainer 2"] < x["trainer 0"] == x["trainer 1"]


def test_hung_job_with_progress_shows_the_flight_records_and_the_straggler(tmp_path):
    job = write_hung_job(tmp_path / "log", nodes=2, per_node=4)
    page = make_page([tmp_path / "log"], tmp_path / "hung.html")
    tree = open_page(page, 1400, 1600)
    [progress] = tree.find(id_="progress")
    assert "hidden" not in progress.attrs
    assert f"straggler: rank {job.slow_rank}" in progress.all_text()
    slow = [e for e in tree.find("pline") if "slow" in e.classes]
    assert [e.attrs["data-rank"] for e in slow] == [str(job.slow_rank)]
    odd_rows = [e for e in tree.find("flights")[0].walk() if "odd" in e.classes]
    assert len(odd_rows) == 1 and f"rank {job.hung_rank}" in odd_rows[0].all_text()
    assert "#190 broadcast" in odd_rows[0].all_text()
    [title] = tree.find(id_="flight-title")
    assert title.all_text() == "Last operations at the hang"
    _, _, pixels = headless.read_png(headless.screenshot(page, tmp_path / "h.png", 1200, 900))
    assert headless.near(headless.colour_counts(pixels), PURPLE, tol=16) > 300  # the hang marks


def test_real_hung_job_shows_where_each_rank_stopped_in_its_flight_record(tmp_path):
    tree = open_page(make_page([SAMPLES / "hung_flight"], tmp_path / "hung_flight.html"))
    assert "hung-odd" in rows(tree)["trainer 2"].classes
    [table] = tree.find("flights")
    odd = [e for e in table.walk() if "odd" in e.classes]
    assert len(odd) == 1 and "rank 2" in odd[0].all_text()
    assert "#19 all_reduce" in odd[0].all_text()
    assert "#20 all_reduce 1024 B float32 · running since" in table.all_text()
    cols = {e.attrs["data-rank"]: e.classes for e in tree.find("col")}
    assert "slow" in cols["1"] and not any("slow" in cols[r] for r in ("0", "2", "3"))
    [detail] = tree.find(id_="detail")  # the rank that stopped is shown first
    assert "trainer 2" in detail.all_text() and "heartbeats" in detail.all_text()


def test_ps_job_shows_its_server_and_trainers(tmp_path):
    tree = open_page(make_page([SAMPLES / "ps"], tmp_path / "ps.html"))
    assert set(rows(tree)) == {"server 0", "trainer 0", "trainer 1"}


def test_paddle_directory_shows_its_processes_without_times_and_says_why(tmp_path):
    log = write_paddle_job(tmp_path / "log")
    tree = open_page(make_page([log], tmp_path / "paddle.html"))
    shown = rows(tree)
    assert set(shown) == {"trainer 0", "trainer 1"}
    assert {"status-failed", "cause"} <= shown["trainer 1"].classes
    assert not tree.find("bar") and len(tree.find("lastout")) == 2
    [note] = tree.find(id_="timeline-note")
    assert "hidden" not in note.attrs and "Paddle's launcher records none" in note.all_text()


def test_512_ranks_collapse_into_node_groups_with_the_odd_ranks_shown(tmp_path):
    job = write_hung_job(tmp_path / "log")
    tree = open_page(make_page([tmp_path / "log"], tmp_path / "big.html"))
    shown = rows(tree)
    assert set(shown) == {f"trainer {job.slow_rank}", f"trainer {job.hung_rank}"}
    assert "straggler" in shown[f"trainer {job.slow_rank}"].classes
    assert "hung-odd" in shown[f"trainer {job.hung_rank}"].classes
    groups = [e for e in tree.find("node-label")]
    texts = [g.all_text() for g in groups]
    assert len(groups) < 10, texts  # not 64 node rows
    assert texts[0].endswith("nodes 0–8 (9)")
    [toggle] = tree.find(id_="toggle-all")
    assert toggle.all_text() == "Show all 512 processes"


def test_a_followed_running_job_says_so_and_draws_up_to_now(tmp_path):
    from paddlike.logs.page import build_page, write_atomically
    from paddlike.logs.reader import load

    log = write_running_job(tmp_path / "log")
    page = tmp_path / "running.html"
    # What `--html page --follow` writes while the job runs (its loop: page/follow_page.py).
    write_atomically(page, build_page(load([str(log)]), [str(log)], follow=600.0))
    tree = open_page(page)
    [row] = rows(tree).values()
    assert "status-running" in row.classes
    assert [e for e in row.walk() if "live" in e.classes], "the bar goes on past now"
    assert [e for e in tree.find("now")], "a 'now' mark"
    [line] = tree.find(id_="follow-line")
    assert line.all_text().startswith("following: this page reloads every 600 s")


def test_the_address_fragment_restores_the_selected_row_after_a_reload(tmp_path):
    # A page that reloads itself (--follow) keeps the user's choice in its #fragment.
    page = make_page([SAMPLES / "ps"], tmp_path / "ps.html")
    tree = Tree(headless.dump_dom_url(page.resolve().as_uri() + "#sel=0&open=&all=0"))
    [selected] = [g for g in tree.find("proc") if "selected" in g.classes]
    label = next(e for e in selected.walk() if "label" in e.classes).text.strip()
    assert label == "server 0"
    assert "server 0" in tree.find(id_="detail")[0].all_text()
