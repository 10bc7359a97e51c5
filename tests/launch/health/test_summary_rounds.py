"""An elastic job's nodes that go on keep the check that left a node out: summary.json's
"preflight" and `python -m paddlike.logs` show it after the next round's passing check
(issue 35, the user trial's second point)."""

from __future__ import annotations

from paddlike.launch.health.gate import kept_with_earlier
from paddlike.logs.preflight import preflight_lines


def check(round_: int, ok: bool) -> dict:
    finding = "node 3 (198.18.0.4): 1.6 MB/s to node 2, median 379 MB/s"
    return {
        "round": round_,
        "ok": ok,
        "seconds": 0.5,
        "bandwidth_median": 379e6,
        "rtt_median": 6e-05,
        "bad_nodes": [] if ok else [3],
        "findings": [] if ok else [finding],
        "notes": [],
        "nodes": [
            {
                "index": 3,
                "host": "198.18.0.4",
                "gpus": None,
                "problems": [],
                "own": None,
                "matmul": [],
                "links": [{"to": 2, "up": 1.6e6, "down": 1.5e6, "rtt": 3e-04}],
            }
        ],
    }


def test_the_failed_check_that_left_a_node_out_is_kept_after_the_next_rounds_pass():
    entry = kept_with_earlier(kept_with_earlier(None, check(0, False)), check(1, True))
    assert entry["round"] == 1 and entry["ok"]
    assert [e["round"] for e in entry["earlier"]] == [0]
    assert entry["earlier"][0]["bad_nodes"] == [3]
    assert entry["earlier"][0]["nodes"][0]["links"][0]["up"] == 1.6e6


def test_passing_checks_are_not_kept_and_earlier_failures_stay_oldest_first():
    assert "earlier" not in kept_with_earlier(check(0, True), check(1, True))
    entry = None
    for round_, ok in ((0, False), (1, True), (2, False), (3, True)):
        entry = kept_with_earlier(entry, check(round_, ok))
    assert [e["round"] for e in entry["earlier"]] == [0, 2]
    assert all("earlier" not in e for e in entry["earlier"])


def test_the_reader_shows_the_check_that_left_the_node_out_then_the_one_that_passed():
    lines = preflight_lines(kept_with_earlier(check(0, False), check(1, True)))
    headers = [line for line in lines if line.startswith("pre-flight check")]
    assert headers == [
        "pre-flight check, round 0 (0.50 s): failed",
        "pre-flight check, round 1 (0.50 s): passed",
    ]
    assert "  node 3 (198.18.0.4): 1.6 MB/s to node 2, median 379 MB/s" in lines
