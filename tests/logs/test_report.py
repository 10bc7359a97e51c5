"""The failure report and the first-error scanner: pure text in, text out."""

from __future__ import annotations

import pytest

from paddlike.logformat import last_run_start
from paddlike.logs.first_error import first_error_in_file, first_error_line
from paddlike.logs.report import (
    format_duration,
    format_failure_line,
    format_root_cause,
    format_success,
    read_tail,
    use_color,
)
from paddlike.summary import RootCause

TRACEBACK = [
    "epoch 0 loss 0.7",
    "Traceback (most recent call last):",
    '  File "train.py", line 9, in <module>',
    "    main()",
    '  File "train.py", line 5, in main',
    "    raise ValueError('bad shape (3, 4)')",
    "ValueError: bad shape (3, 4)",
]


def failed_cause(**overrides: object) -> RootCause:
    fields: dict[str, object] = dict(
        reason="trainer rank 1 exited with code 3",
        host="198.18.0.2",
        node_index=1,
        role="trainer",
        rank=3,
        local_index=1,
        exit_code=3,
        log_file="workerlog.1",
        tail=[f"line {i}" for i in range(30)],
        duration=2.5,
    )
    fields.update(overrides)
    return RootCause(**fields)  # type: ignore[arg-type]


def test_failure_report_names_host_node_role_rank_local_index_exit_duration_and_log():
    text = format_root_cause(failed_cause(), log_dir="log")
    first, *rest = text.splitlines()
    assert first == "FAILED: trainer rank 1 exited with code 3"
    assert "  where    node 1 (198.18.0.2), trainer rank 3, local index 1" in rest
    assert "  exit     code 3" in rest
    assert "  ran for  2.50 s" in rest
    assert "  log      log/workerlog.1" in rest


def test_failure_report_quotes_the_last_20_lines_of_the_log():
    text = format_root_cause(failed_cause())
    assert "last 20 lines of workerlog.1:" in text
    assert "    | line 29" in text and "    | line 10" in text
    assert "line 9\n" not in text + "\n"


def test_failure_report_names_the_signal_and_its_number():
    text = format_root_cause(failed_cause(exit_code=None, signal="SIGKILL"))
    assert "exit     signal SIGKILL (9)" in text


def test_failure_report_without_a_process_is_just_the_reason():
    text = format_root_cause(RootCause(reason="node 1 (198.18.0.2) stopped sending heartbeats"))
    assert text == "FAILED: node 1 (198.18.0.2) stopped sending heartbeats"


def test_a_launcher_that_received_a_signal_is_stopped_not_failed():
    cause = RootCause(
        reason="launcher on 127.0.0.1 received SIGINT", host="127.0.0.1", node_index=0,
        signal="SIGINT",
    )  # fmt: skip
    assert cause.stopped and not failed_cause().stopped
    assert format_root_cause(cause) == (
        "STOPPED: launcher on 127.0.0.1 received SIGINT\n"
        "  where  node 0 (127.0.0.1)\n"
        "  exit   signal SIGINT (2)"
    )
    assert format_root_cause(cause, color=True).startswith("\x1b[33;1mSTOPPED:\x1b[0m ")


def test_a_failure_a_restart_follows_is_one_line_with_its_first_error_and_log():
    cause = failed_cause(tail=[*TRACEBACK, "cleanup done"])
    assert format_failure_line(cause, log_dir="log") == (
        "trainer rank 1 exited with code 3: ValueError: bad shape (3, 4) (log log/workerlog.1)"
    )
    torch = failed_cause(tail=[f"[rank1]: {line}" for line in TRACEBACK])
    assert format_failure_line(torch, log_dir="log") == (
        "trainer rank 1 exited with code 3: ValueError: bad shape (3, 4) (log log/workerlog.1)"
    )
    quiet = failed_cause(tail=["epoch 0"], log_file=None)
    assert format_failure_line(quiet) == "trainer rank 1 exited with code 3"


def test_a_hang_naming_its_odd_rank_shows_its_log_and_quotes_the_dumps_summary():
    summary = ["rank 2 (nodeb, workerlog.0) is stopped (SIGSTOP, or held by a debugger): no stack",
               "ranks 0–1 (2 of 3) wait in `all_reduce` called from train.py:9 (main)"]  # fmt: skip
    cause = RootCause(
        reason=summary[0], host="198.18.0.2", node_index=1, role="trainer", rank=2,
        exit_code=124, log_file="/work/log/workerlog.0", tail=summary,
        stacks="/work/log/stacks/20261125-215905/summary.txt",
    )  # fmt: skip
    text = format_root_cause(cause)
    assert text.splitlines()[:6] == [
        f"FAILED: {summary[0]}",
        "  where   node 1 (198.18.0.2), trainer rank 2",
        "  exit    code 124",
        "  log     /work/log/workerlog.0",
        "  stacks  /work/log/stacks/20261125-215905/summary.txt",
        "  the hang's summary (summary.txt):",
    ]
    assert "workerlog.0:" not in text  # the summary is not that log's last lines


def test_failure_report_says_when_the_log_is_empty():
    assert "workerlog.1 is empty" in format_root_cause(failed_cause(tail=[]))


def test_failure_report_is_plain_text_unless_colour_is_asked_for():
    assert "\x1b[" not in format_root_cause(failed_cause())
    assert "\x1b[" in format_root_cause(failed_cause(), color=True)


def test_colour_is_off_for_files_and_with_no_color(tmp_path, monkeypatch):
    with open(tmp_path / "out", "w") as f:
        assert not use_color(f)

    class Tty:
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_color(Tty())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_color(Tty())


def test_success_line_counts_workers_and_nodes():
    assert format_success(4, 12.34, nnodes=2, log_dir="log") == (
        "OK: 4 workers finished in 12.3 s (2 nodes), logs in log"
    )
    assert format_success(1, 0.5) == "OK: 1 worker finished in 0.50 s"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "-"), (0.421, "0.42 s"), (12.34, "12.3 s"), (245, "4m05s"), (7380, "2h03m")],
)
def test_durations_read_at_a_glance(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    ("lines", "error"),
    [
        (TRACEBACK, "ValueError: bad shape (3, 4)"),
        ([*TRACEBACK, "", "more output"], "ValueError: bad shape (3, 4)"),
        (
            [
                *TRACEBACK,
                "",
                "During handling of the above exception, another exception occurred:",
                "",
                "Traceback (most recent call last):",
                '  File "train.py", line 12, in <module>',
                "RuntimeError: cleanup failed",
            ],
            "RuntimeError: cleanup failed",
        ),
        (
            ["x", "NCCL WARN Connect to 10.0.0.2<4242> failed : Connection refused", "y"],
            "NCCL WARN Connect to 10.0.0.2<4242> failed : Connection refused",
        ),
        (
            ["RuntimeError: NCCL error in: ../nccl.cpp:1, unhandled system error"],
            "RuntimeError: NCCL error in: ../nccl.cpp:1, unhandled system error",
        ),
        (["step 1", "Killed"], "Killed"),
        (
            ["Out of memory: Killed process 4242 (python) total-vm:1kB"],
            "Out of memory: Killed process 4242 (python) total-vm:1kB",
        ),
        (
            ["torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"],
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB",
        ),
        (
            [
                "--------------------------------------",
                "Error Message Summary:",
                "--------------------------------------",
                "InvalidArgumentError: The shape of input is wrong (at /paddle/op.cc:12)",
            ],
            "InvalidArgumentError: The shape of input is wrong (at /paddle/op.cc:12)",
        ),
        (["epoch 1 loss 0.3", "done"], None),
        (["the Killed count is 3"], None),
        # torch (2.2+) writes a rank's uncaught exception behind "[rankN]: "
        ([f"[rank1]: {line}" for line in TRACEBACK], "ValueError: bad shape (3, 4)"),
        (
            [
                "[rank1]: Traceback (most recent call last):",
                '[rank1]:   File "ddp.py", line 39, in <module>',
                "step 5 of rank 0",  # another writer's line, interleaved
                "[rank1]:     main()",
                "[rank1]: RuntimeError: boom on rank 1 at step 5",
                "[rank1]:",
                "[rank1]: During handling of the above exception, another exception occurred:",
                "[rank1]:",
                "[rank1]: Traceback (most recent call last):",
                '[rank1]:   File "ddp.py", line 41, in <module>',
                "[rank1]: OSError: cleanup failed",
            ],
            "OSError: cleanup failed",
        ),
        # a tail that starts inside a torch traceback: the tagged exception line alone
        (
            [
                '[rank1]:     raise RuntimeError(f"boom on rank {rank}")',
                "[rank1]: RuntimeError: boom",
            ],
            "RuntimeError: boom",
        ),
        # an indented traceback (quoted in a message): indentation is no writer's label
        (
            ["  Traceback (most recent call last):", '    File "t.py", line 3', "ValueError: x"],
            "ValueError: x",
        ),
        # a message's own prefix, not repeated by the frames (logging's "ERROR ... %s", tb)
        (
            ["12:00:01 ERROR step failed: Traceback (most recent call last):", *TRACEBACK[2:]],
            "ValueError: bad shape (3, 4)",
        ),
    ],
)
def test_first_error_line(lines, error):
    assert first_error_line(lines) == error


def test_first_error_in_a_file_reads_only_the_last_run(tmp_path):
    log = tmp_path / "workerlog.0"
    header = "==== paddlike run 2026-01-01 00:00:00 job j trainer rank 0 local 0 restart"
    log.write_text(
        f"{header} 0: python t.py ====\n"
        + "\n".join(TRACEBACK)
        + f"\n{header} 1: python t.py ====\nZeroDivisionError: division by zero\n"
    )
    assert first_error_in_file(str(log)) == "ValueError: bad shape (3, 4)"
    start = last_run_start(str(log))
    assert first_error_in_file(str(log), start=start) == "ZeroDivisionError: division by zero"


def test_tail_reads_the_last_lines_of_a_big_log(tmp_path):
    log = tmp_path / "big"
    log.write_text("".join(f"line {i}\n" for i in range(100_000)))
    assert read_tail(log, 3) == ["line 99997", "line 99998", "line 99999"]
    assert read_tail(tmp_path / "missing", 3) == []
