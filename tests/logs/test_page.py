"""python -m paddlike.logs DIR --html FILE: what the page holds, read without a browser.

The page's facts (the JSON its script draws from) and its static parts are checked on
real log directories (log_samples/) and on written ones (tests/support/synthetic_job.py): a
failed, a restarted, an elastic, a hung, a PS and a Paddle-written job, and 512 ranks.
tests/logs/test_page_browser.py checks what the drawn page shows.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from paddlike.logs import outcome
from paddlike.logs.__main__ import main
from paddlike.logs.page import follow_page as page_follow
from paddlike.logs.page.facts import job_facts, run_starts
from paddlike.logs.reader import load
from paddlike.summary import read_summary, write_summary
from tests.support.synthetic_job import (
    write_elastic_job,
    write_hung_job,
    write_paddle_job,
    write_running_job,
    write_torch_hang,
)

SAMPLES = Path(__file__).resolve().parents[2] / "log_samples"


def run(argv: list[object]) -> tuple[int, str]:
    out = io.StringIO()
    code = main([str(a) for a in argv], out=out)
    return code, out.getvalue()


def page_facts(page: str) -> dict:
    match = re.search(r'<script type="application/json" id="facts">(.*?)</script>', page, re.S)
    assert match, "the page carries its facts"
    return json.loads(match.group(1))


def by_name(facts: dict) -> dict[str, dict]:
    return {f"{p['role']} {p['rank']}": p for p in facts["procs"]}


def test_html_file_holds_the_consoles_root_cause_report_and_every_process(tmp_path):
    target = tmp_path / "job.html"
    code, out = run([SAMPLES / "failed", "--html", target])
    assert code == 0  # the page is written (the job's outcome is the text view's)
    assert f"wrote {target}" in out
    page = target.read_text()
    _, console = run([SAMPLES / "failed"])
    report = console.split("\n\n")[0]  # the root cause block, above the table
    assert report.startswith("FAILED: trainer rank 1 exited with code 3")
    pre = re.search(r'<pre id="report" class="failed">(.*?)</pre>', page, re.S)
    assert pre and _unescape(pre.group(1)) == report
    facts = page_facts(page)
    procs = by_name(facts)
    assert set(procs) == {"trainer 0", "trainer 1"}
    assert procs["trainer 1"]["cause"] is True and procs["trainer 1"]["status"] == "failed"
    assert procs["trainer 1"]["error"] == "RuntimeError: rank 1 cannot read shard data/part-00001"
    assert procs["trainer 1"]["tail"][-1] == procs["trainer 1"]["error"]
    assert "log_samples/scripts/train.py" in procs["trainer 1"]["cmd"]
    assert "cause" not in procs["trainer 0"] and procs["trainer 0"]["exit"] == "SIGTERM"
    assert facts["cause"]["t"] is not None and 0 <= facts["cause"]["t"] <= facts["t1"]


def _unescape(text: str) -> str:
    import html

    return html.unescape(text)


def test_html_dash_writes_the_page_to_stdout_and_nothing_else():
    code, out = run([SAMPLES / "success", "--html", "-"])
    assert code == 0
    assert out.startswith("<!DOCTYPE html>") and out.rstrip().endswith("</html>")
    assert "OK: 2 workers finished in" in out


def test_page_loads_nothing_from_anywhere():
    _, page = run([SAMPLES / "hung", "--html", "-"])
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page, re.I)
    assert "@import" not in page and "url(" not in page
    assert len(re.findall(r"<script\b", page)) == len(re.findall(r"</script>", page)) == 4


def test_the_pages_script_and_style_are_package_data_that_every_install_carries():
    # render.py reads them from paddlike/logs/page/assets/ with importlib.resources: a file
    # there that setup.cfg does not ship would be missing from a wheel (a page without
    # its script), or one the page never reads would ship for nothing
    from paddlike.logs.page import render

    folder = Path(render.__file__).parent / "assets"
    assert sorted(p.name for p in folder.iterdir()) == sorted(render.ASSETS)
    setup = (SAMPLES.parent / "setup.cfg").read_text()
    assert re.search(r"^paddlike\.logs\.page = assets/\*$", setup, flags=re.MULTILINE)
    code, page = run([SAMPLES / "failed", "--html", "-"])
    assert code == 0
    for name in render.ASSETS:
        if name != "page.html":  # a template: its {fields} are filled in
            assert f">{render.asset(name)}</" in page, name


def test_a_log_line_that_closes_a_script_element_stays_data(tmp_path):
    log = write_paddle_job(tmp_path / "log")
    (log / "workerlog.0").write_text("</script><script>alert(1)</script>\nstep 1\n")
    _, page = run([log, "--html", "-"])
    assert len(re.findall(r"</script>", page)) == 4
    assert by_name(page_facts(page))["trainer 0"]["tail"][0].startswith("</script>")


def test_restarted_job_shows_each_rounds_start_and_both_runs_of_each_process():
    facts = job_facts(load([SAMPLES / "restarted"]))
    assert [r["label"] for r in facts["rounds"]] == ["first run", "restart 1"]
    for p in facts["procs"]:
        assert [run[1] for run in p["runs"]] == [0, 1]
        assert p["runs"][-1][0] == p["start"]  # the last run's start is the summary's, exact
        assert p["runs"][0][0] <= p["start"]
    assert all(p["status"] == "ok" for p in facts["procs"])


def test_run_starts_reads_every_header_of_a_log(tmp_path):
    log = tmp_path / "workerlog.0"
    log.write_text(
        "==== paddlike run 2026-01-01 10:00:00 job j trainer rank 0 local 0 restart 0: x ====\n"
        "out\n"
        "==== paddlike run 2026-01-01 10:00:07 job j trainer rank 2 local 0 restart 0 round 2: "
        "x ====\n"
    )
    runs = run_starts(log)
    assert [(r[1], r[2]) for r in runs] == [(0, None), (0, 2)]
    assert runs[1][0] - runs[0][0] == 7.0
    # A log of gigabytes is read only so far: headers beyond the limit are not looked for.
    assert len(run_starts(log, limit=100)) == 1


def test_elastic_job_has_a_band_per_round_and_the_lost_node(tmp_path):
    write_elastic_job(tmp_path / "log")
    facts = job_facts(load([tmp_path / "log"]))
    rounds = facts["rounds"]
    assert [(r["label"], len(r["members"]), r["membership"]) for r in rounds] == [
        ("round 1", 3, "lost"),
        ("round 2", 2, None),
    ]
    assert rounds[0]["start"] < rounds[1]["start"]
    assert "stopped sending heartbeats" in rounds[0]["ended"]
    assert len(facts["procs"]) == 4 and len(facts["nodes"]) == 2


def test_real_elastic_job_that_lost_a_node_has_both_rounds_and_the_lost_nodes_last_output(
    tmp_path,
):
    # git keeps no file times: give the lost node's log the time its last line was written
    # (a second into round 0), as the real run left it
    sample = tmp_path / "elastic_lost"
    shutil.copytree(SAMPLES / "elastic_lost", sample)
    t0 = job_facts(load([sample]))["t0"]
    lost_log = sample / "127.0.0.1.2" / "workerlog.0"
    os.utime(lost_log, (t0 + 1.0, t0 + 1.0))
    facts = job_facts(load([sample]))
    rounds = facts["rounds"]
    assert [(len(r["members"]), r["membership"]) for r in rounds] == [(3, "lost"), (2, None)]
    assert rounds[0]["start"] < rounds[1]["start"]
    procs = by_name(facts)
    assert {p["status"] for p in procs.values()} == {"ok", "gone"}
    [gone] = [p for p in procs.values() if p["status"] == "gone"]
    assert gone["end"] is None and gone["mtime"] == pytest.approx(1.0, abs=0.01)
    survivors = [p for p in procs.values() if p["status"] == "ok"]
    assert len(survivors) == 2 and all(len(p["runs"]) == 2 for p in survivors)
    # the job went on without the lost node and finished: its verdict is the last round's
    assert facts["report"].startswith("OK: 2 workers finished in "), facts["report"]
    assert "(2 nodes)" in facts["report"], facts["report"]


def test_hung_sample_marks_the_stack_dump_and_the_rank_that_stopped():
    facts = job_facts(load([SAMPLES / "hung"]))
    [dump] = facts["dumps"]
    assert dump["odd"] == 2
    assert dump["summary"][0].startswith("rank 2 (")
    assert 0 < dump["t"] <= facts["t1"]
    assert facts["progress"] is None  # a torch job: no paddlike progress files


def test_hung_job_with_progress_files_carries_each_ranks_flight_record(tmp_path):
    job = write_hung_job(tmp_path / "log", nodes=2, per_node=4)
    facts = job_facts(load([tmp_path / "log"]))
    prog = facts["progress"]
    assert set(prog["ranks"]) == {str(r) for r in range(8)}
    assert prog["straggler_ranks"] == [job.slow_rank]
    assert any(f"rank {job.hung_rank} never entered collective #201" in m for m in prog["mismatch"])
    hung = prog["ranks"][str(job.hung_rank)]["flight"][-1]
    other = prog["ranks"]["0"]["flight"][-1]
    assert (hung[1], hung[9]) == (190, "done") and (other[1], other[9]) == (201, "running")
    assert other[8] is None  # still running: no end time


def test_real_hung_job_carries_its_progress_files_flight_records_and_straggler():
    facts = job_facts(load([SAMPLES / "hung_flight"]))
    prog = facts["progress"]
    assert sorted(prog["ranks"]) == ["0", "1", "2", "3"]
    assert prog["straggler_ranks"] == [1]
    assert any("rank 2 never entered collective #20" in m for m in prog["mismatch"])
    last = {r: p["flight"][-1] for r, p in prog["ranks"].items()}
    assert (last["2"][1], last["2"][9]) == (19, "done")
    assert all((last[r][1], last[r][9]) == (20, "running") for r in ("0", "1", "3"))
    assert facts["dumps"][0]["odd"] == 2


def test_a_page_decodes_only_the_newest_flight_entries_it_shows(tmp_path):
    from paddlike.distributed.progress import read_progress

    write_hung_job(tmp_path / "log", nodes=1, per_node=2)
    path = tmp_path / "log" / "node00" / ".progress" / "rank.0"
    full, newest = read_progress(path), read_progress(path, flight=5)
    assert len(full.flight) == 201 and newest.flight == full.flight[-5:]
    assert (newest.ops, newest.step) == (full.ops, full.step)


def test_ps_job_shows_servers_and_trainers():
    facts = job_facts(load([SAMPLES / "ps"]))
    assert sorted(by_name(facts)) == ["server 0", "trainer 0", "trainer 1"]


def test_paddle_written_directory_has_no_bars_but_when_each_log_last_changed(tmp_path):
    log = write_paddle_job(tmp_path / "log")
    facts = job_facts(load([log]))
    procs = by_name(facts)
    assert procs["trainer 1"]["status"] == "failed" and procs["trainer 1"]["cause"] is True
    for p in procs.values():
        assert p["start"] is None and p["end"] is None and p["mtime"] is not None
    assert facts["report"].startswith("FAILED: trainer rank 1 (workerlog.1) logged: ExternalError")


def test_512_ranks_make_a_page_of_a_few_megabytes(tmp_path):
    job = write_hung_job(tmp_path / "log")
    target = tmp_path / "job.html"
    code, _ = run([tmp_path / "log", "--html", target])
    assert code == 0  # written (the job hung: the text view exits 124)
    size = target.stat().st_size
    assert size < 3 * 1024 * 1024, f"{size} bytes"
    facts = page_facts(target.read_text())
    assert len(facts["procs"]) == job.world == 512 and len(facts["nodes"]) == 64
    assert len(facts["progress"]["ranks"]) == 512


def test_missing_directory_is_one_line_and_exit_2(tmp_path, capsys):
    code, out = run([tmp_path / "nope", "--html", tmp_path / "x.html"])
    assert code == 2 and out == ""
    assert "no such directory" in capsys.readouterr().err
    assert not (tmp_path / "x.html").exists()


def test_follow_to_stdout_is_refused_with_the_fix(capsys):
    code, _ = run([SAMPLES / "success", "--html", "-", "--follow"])
    assert code == 2
    assert "give a file (--html job.html --follow)" in capsys.readouterr().err


def test_follow_rewrites_the_page_until_the_job_ends_and_the_last_page_stops_reloading(tmp_path):
    log = write_running_job(tmp_path / "log")
    target = tmp_path / "job.html"
    pages: list[dict] = []

    def job_ends(_interval: float) -> None:
        # What the browser would load between two passes; then the launcher records the end.
        pages.append(page_facts(target.read_text()))
        summary = read_summary(log)
        summary.status, summary.exit_code, summary.end_time = "succeeded", 0, time.time()
        summary.processes[0].status, summary.processes[0].exit_code = "ok", 0
        summary.processes[0].end_time = time.time()
        write_summary(log, summary)

    out = io.StringIO()
    code = page_follow.follow_page([str(log)], target, out=out, interval=0.5, wait=job_ends)
    assert code == 0
    assert pages[0]["status"] == "running" and pages[0]["follow"] == 0.5
    last = page_facts(target.read_text())
    assert last["status"] == "succeeded" and last["follow"] == 0.0
    assert "every 0.5 s while the job runs" in out.getvalue()
    assert "job succeeded: wrote the last page" in out.getvalue()


def test_follow_stops_when_the_summary_says_running_but_its_launcher_is_gone(tmp_path):
    log = write_running_job(tmp_path / "log")
    (log / ".paddlike.owner").unlink()  # what a SIGKILLed launcher leaves: no owner...
    summary = read_summary(log)
    summary.processes[0].pid = 2**22 + 12345  # ...and its workers gone with it
    write_summary(log, summary)
    waited: list[float] = []
    out = io.StringIO()
    code = page_follow.follow_page([str(log)], tmp_path / "job.html", out=out, wait=waited.append)
    assert waited == [] and "wrote the last page" in out.getvalue()
    assert code == 0 != outcome.exit_code(load([log]))  # the page is written; the job is gone
    assert page_facts((tmp_path / "job.html").read_text())["status"] == "gone"


def test_html_exits_0_once_the_page_is_written_whatever_the_jobs_outcome(tmp_path):
    # `paddlike.logs DIR --html x && xdg-open x` opens the page of a failed or hung job too;
    # the outcome is the text view's exit status.
    for sample in ("success", "failed", "hung"):
        target = tmp_path / f"{sample}.html"
        assert run([SAMPLES / sample, "--html", target])[0] == 0
        assert target.is_file()
        assert run([SAMPLES / sample, "--html", "-"])[0] == 0
    assert run([SAMPLES / "failed"])[0] == 3  # the text view: the failed worker's exit code
    assert run([tmp_path / "missing", "--html", tmp_path / "x.html"])[0] == 2


@pytest.mark.parametrize(
    "sample",
    [
        "success",
        "failed",
        "restarted",
        "ps",
        "hung",
        "hung_flight",
        "torch_flight",
        "elastic_lost",
        "two_node",
    ],
)
def test_every_log_sample_has_its_page_beside_it(sample):
    page = SAMPLES / f"{sample}.html"
    assert page.is_file(), f"{page} missing: run log_samples/regenerate.py {sample}"
    facts = page_facts(page.read_text())
    assert facts["procs"], sample


def last_signs(log: Path) -> dict[int, dict]:
    facts = job_facts(load([log]))
    start = read_summary(log).start_time - facts["t0"]
    return {p["rank"]: {**p["last"], "t": round(p["last"]["t"] - start, 3)} for p in facts["procs"]}


def test_a_torch_hang_marks_each_ranks_last_collective_the_named_rank_first(tmp_path):
    write_torch_hang(tmp_path / "log", SAMPLES, last={0: 10.0, 1: 10.0, 2: 10.0})
    assert last_signs(tmp_path / "log") == {
        0: {"t": 10.0, "what": "all_reduce #5 (running)"},
        1: {"t": 10.0, "what": "barrier #5 (running)", "first": True},  # the report names it
        2: {"t": 10.0, "what": "all_reduce #5 (running)"},
    }


@pytest.mark.parametrize(
    ("last", "first"),
    [
        ({0: 10.0, 1: 10.0, 2: 7.0}, [2]),  # rank 2's last collective came 3 s before the rest
        ({0: 10.0, 1: 10.0, 2: 9.5}, []),  # within a second: no rank stands out by time
    ],
)
def test_without_a_named_rank_the_one_whose_last_collective_came_first_is_marked(
    tmp_path, last, first
):
    report = ["no single rank stands out", "ranks 0–2 (3 of 3) wait in `all_reduce`"]
    write_torch_hang(tmp_path / "log", SAMPLES, last=last, summary=report)
    signs = last_signs(tmp_path / "log")
    assert {r: s["t"] for r, s in signs.items()} == last
    assert [r for r, s in signs.items() if s.get("first")] == first


def test_a_sample_without_collective_times_marks_no_time(tmp_path):
    shutil.copytree(SAMPLES / "torch_flight", tmp_path / "log")  # stacks.json of before
    facts = job_facts(load([tmp_path / "log"]))
    assert [p["last"]["t"] for p in facts["procs"]] == [None, None, None]


def test_paddlikes_own_flight_record_gives_each_ranks_last_sign_of_life_too():
    # log_samples/hung_flight: rank 2 stopped before its 20th all_reduce
    facts = job_facts(load([SAMPLES / "hung_flight"]))
    last = {p["rank"]: p["last"] for p in facts["procs"]}
    assert {r: s["what"] for r, s in last.items()} == {
        0: "all_reduce #20 (running)", 1: "all_reduce #20 (running)",
        2: "all_reduce #19 (done)", 3: "all_reduce #20 (running)",
    }  # fmt: skip
    assert last[2]["first"] and last[2]["t"] < min(last[r]["t"] for r in (0, 1, 3))
    assert last[0]["t"] == pytest.approx(1.63, abs=0.01)  # the Progress table's "+1.63 s"


def straggler_table(late_rank: int | None, check: int) -> dict:
    """summary.json's "stragglers" as a check of 3 ranks writes it (`lateness`)."""
    from paddlike.logs.lateness import Arrival, find_stragglers

    extra = {late_rank: 0.05} if late_rank is not None else {}
    arrivals = {
        r: [Arrival("torch:0", k, "all_reduce", 100.0 + 0.1 * k + extra.get(r, 0.0))
            for k in range(1, 60)]
        for r in range(3)
    }  # fmt: skip
    found = find_stragglers(arrivals, dict.fromkeys(range(3), "vm"))
    return {"time": time.time(), "check": check, "since": 1, **found.to_json()}


def test_the_heat_maps_facts_come_from_the_straggler_check_and_none_without_one(tmp_path):
    assert job_facts(load([SAMPLES / "success"]))["lateness"] is None
    log = tmp_path / "log"
    shutil.copytree(SAMPLES / "success", log)
    summary = read_summary(log)
    summary.stragglers = straggler_table(1, check=4)
    write_summary(log, summary)
    lateness = job_facts(load([log]))["lateness"]
    assert lateness["check"] == 4 and lateness["named"][0].startswith("straggler: rank 1 (node vm")
    assert [r["rank"] for r in lateness["ranks"]] == [0, 1, 2]
    assert lateness["ranks"][1]["straggler"] and lateness["ranks"][1]["lateness_ms"][0] == 50.0
    assert lateness["collectives"][0][:3] == ["all_reduce", 1, "torch:0"]
    assert lateness["medians"]["1"] == [pytest.approx(0.05), 1.0]
    # a summary written before the map was kept (no "heat"): no map, no error
    summary.stragglers = {k: v for k, v in summary.stragglers.items() if k != "heat"}
    write_summary(log, summary)
    assert job_facts(load([log]))["lateness"] is None
    assert run([log, "--html", tmp_path / "x.html"])[0] == 0


def test_a_followed_page_draws_each_new_checks_heat_map(tmp_path):
    # The launcher rewrites summary.json at every check; --follow's next page draws it.
    log = write_running_job(tmp_path / "log")
    target = tmp_path / "job.html"
    pages: list[dict] = []

    def next_check(_interval: float) -> None:
        pages.append(page_facts(target.read_text()))
        summary = read_summary(log)
        if len(pages) == 1:
            summary.stragglers = straggler_table(None, check=1)
        elif len(pages) == 2:
            summary.stragglers = straggler_table(2, check=2)
        else:
            summary.status, summary.exit_code, summary.end_time = "succeeded", 0, time.time()
        write_summary(log, summary)

    out = io.StringIO()
    assert page_follow.follow_page([str(log)], target, out=out, interval=0.5, wait=next_check) == 0
    first, calm, late = pages
    assert first["lateness"] is None
    assert calm["lateness"]["check"] == 1
    assert not any(r["straggler"] for r in calm["lateness"]["ranks"])
    assert late["lateness"]["check"] == 2
    assert [r["rank"] for r in late["lateness"]["ranks"] if r["straggler"]] == [2]
