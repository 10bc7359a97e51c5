"""python -m paddlike.logs [DIR ...]: what every process of a job did, and why it failed.

Exit status (the default view, --json and --follow): the job's outcome, as
`paddlike.logs.outcome` tabulates it (0 succeeded; the job's exit code when it failed;
75 still running; 3 no summary and no error; 2 not a log directory or a bad option);
130 on Ctrl-C during --follow. --html exits 0 once the page is written (2 when it
cannot be), so that `--html x && xdg-open x` opens a failed job's page too.
--rank/--role exit 0 once the log is shown. --stacks exits 2 when there is nothing to
take stacks of (no summary.json, or no running trainer and no progress files). While a
launcher on this machine runs the job of a single DIR, --stacks asks it (SIGRTMIN+4):
it takes the stacks of the whole job, on every node, and this command prints what it
wrote.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

from paddlike.commands import command_name, stdout_closed
from paddlike.logformat import read_regular_text
from paddlike.logs import outcome
from paddlike.logs.follow_logs import Follower
from paddlike.logs.nodedirs import LogDirError, node_dirs
from paddlike.logs.process_table import format_job, format_process_tail
from paddlike.logs.reader import JobView, ProcessView, load
from paddlike.logs.report import TAIL_LINES, read_tail, use_color

ROLES = ("trainer", "server", "heter")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=command_name(sys.argv[0], "paddlike.logs"),
        description="Summarise a log directory written by paddlike.launch (or by Paddle's "
        "launchers): every process's status, exit code, first error line, and the root cause.",
        epilog="exit status: the job's outcome, for CI scripts: 0 it succeeded; its exit code "
        "when it failed or was stopped (1 where none is known, or its launcher was killed); "
        f"{outcome.EXIT_RUNNING} it is still running; {outcome.EXIT_UNKNOWN} no summary.json "
        f"and no error in the logs; {outcome.EXIT_NOT_LOGS} not a log directory or a bad "
        "option. --rank/--role exit 0 once the log is shown; --html exits 0 once the page is "
        "written (2 when it cannot be), whatever the job's outcome. A running job quiet for "
        f"{outcome.HUNG_AFTER:g} s (no output, heartbeat or collective from any rank) is "
        "called hung: --stacks shows where each rank is.",
    )
    parser.add_argument(
        "dirs",
        nargs="*",
        metavar="DIR",
        help="log directory (default: log); several for a multi-node job, or one parent "
        "holding one directory per node",
    )
    import paddlike

    parser.add_argument(
        "--version", action="version", version=f"%(prog)s (paddlike {paddlike.__version__})"
    )
    parser.add_argument("--rank", type=int, help="show the end of this process's log")
    parser.add_argument(
        "--role",
        choices=ROLES,
        help="role of --rank (default trainer); alone: the end of every log of the role",
    )
    parser.add_argument(
        "--tail",
        type=int,
        metavar="K",
        help=f"lines of log to show with --rank/--role (default {TAIL_LINES}) and at the "
        "start of --follow (default 10)",
    )
    parser.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="print every log as it grows, lines prefixed [role rank]; stops when the job ends",
    )
    parser.add_argument("--json", action="store_true", help="the same facts as JSON")
    parser.add_argument(
        "--html",
        metavar="FILE",
        help="write the job as one self-contained HTML page (timeline, progress, root cause) "
        "to FILE ('-': stdout); with --follow, rewrite it until the job ends; exit 0 once "
        "it is written",
    )
    parser.add_argument(
        "--stacks",
        action="store_true",
        help="take the Python stack of every running trainer of this node's job (py-spy; "
        "through its launcher, by SIGRTMIN+4, while one runs it), write "
        "DIR/stacks/<time>/rank.N.txt and summary.txt, and print where the ranks are, "
        "the odd one out first",
    )
    parser.add_argument(
        "--stragglers",
        action="store_true",
        help="the last straggler check's table (--straggler_check): per rank the share of "
        "collectives it arrived at last, its median and p90 lateness; the straggler first, "
        "marked *; exits as without it",
    )
    return parser


def job_to_json(job: JobView) -> dict[str, Any]:
    """The facts of the default view as plain JSON types."""
    nodes = []
    for node in job.nodes:
        s = node.summary
        nodes.append(
            {
                "log_dir": node.log_dir,
                "node_index": node.node_index,
                "host": node.host,
                "hostname": node.hostname,
                "status": node.status,
                "has_summary": s is not None,
                "job_id": s.job_id if s else None,
                "mode": s.mode if s else None,
                "nnodes": s.nnodes if s else None,
                "exit_code": s.exit_code if s else None,
                "start_time": s.start_time if s else None,
                "end_time": s.end_time if s else None,
                "restarts": s.restarts if s else 0,
                "restart_causes": s.restart_causes if s else [],
                "recoveries": s.recoveries if s else [],
                "hangs": s.hangs if s else [],
                "stragglers": s.stragglers if s else None,
                "trainer_endpoints": node.trainer_endpoints,
                "server_endpoints": node.server_endpoints,
                "notes": node.notes,
                "processes": [process_to_json(p) for p in node.processes],
            }
        )
    return {
        "status": job.status,
        "exit_code": outcome.exit_code(job),
        "hung_for": job.hung_for,
        "root_cause": job.root_cause.to_dict() if job.root_cause else None,
        "nodes": nodes,
    }


def process_to_json(p: ProcessView) -> dict[str, Any]:
    data = asdict(p)
    data["duration"] = p.duration
    return data


def _select(job: JobView, role: str | None, rank: int | None) -> list[ProcessView] | str:
    """The processes --role/--rank name, or the one-line error when there are none."""
    if rank is not None:
        proc = job.find(role or "trainer", rank)
        if proc is None:
            have = sorted(
                p.rank if p.rank is not None else p.local_index
                for p in job.processes
                if p.role == (role or "trainer")
            )
            listed = ", ".join(map(str, have)) or "none"
            name = role or "trainer"
            return f"--rank {rank}: no {name} rank {rank} in these logs ({name} ranks: {listed})"
        return [proc]
    procs = [p for p in job.processes if p.role == role]
    if not procs:
        return f"--role {role}: no {role} process in these logs"
    return procs


def main(argv: list[str] | None = None, *, out: TextIO | None = None) -> int:
    """The command; a reader that stops reading (`| head`) ends it quietly."""
    try:
        return _main(argv, out or sys.stdout)
    except BrokenPipeError:
        return stdout_closed()


def _refused(args: argparse.Namespace) -> str | None:
    """Options given together that would be silently ignored: the one line, or None."""
    if args.tail is not None and args.tail < 0:
        return f"--tail {args.tail}: must be 0 or more lines"
    if args.json and args.html is not None:
        return "--json with --html: one output at a time (the page holds the same facts)"
    if args.tail is not None and args.rank is None and args.role is None and not args.follow:
        return (
            f"--tail {args.tail}: the lines of one log, with --rank N or --role R "
            "(or --follow); the default view quotes the failed process's last lines"
        )
    return None


def _main(argv: list[str] | None, out: TextIO) -> int:
    args = build_parser().parse_args(argv)
    dirs: list[str] = args.dirs or ["log"]
    refused = _refused(args)
    if refused is not None:
        print(f"paddlike.logs: {refused}", file=sys.stderr)
        return 2
    color = use_color(out)
    if args.html is not None:
        from paddlike.logs.page import main as html_main

        return html_main(dirs, args.html, follow=args.follow, out=out)
    if args.stacks:
        return _stacks(dirs, args.json, out)
    try:
        if args.follow:
            return _follow(dirs, args, out, color)
        job = load(dirs)
    except LogDirError as e:
        print(f"paddlike.logs: {e}", file=sys.stderr)
        return outcome.EXIT_NOT_LOGS
    if args.rank is not None or args.role is not None:
        selected = _select(job, args.role, args.rank)
        if isinstance(selected, str):
            print(f"paddlike.logs: {selected}", file=sys.stderr)
            return 2
        tail = TAIL_LINES if args.tail is None else args.tail
        if args.json:
            items = [dict(process_to_json(p), tail=read_tail(p.log_path, tail)) for p in selected]
            out.write(json.dumps(items, indent=2) + "\n")
        else:
            blocks = [
                format_process_tail(p, read_tail(p.log_path, tail), color=color) for p in selected
            ]
            out.write("\n\n".join(blocks) + "\n")
        return 0
    job.hung_for = outcome.hung_for(job)
    if args.stragglers:  # issue 37
        from paddlike.logs.lateness_report import summary_lines

        tables = [n.summary.stragglers for n in job.nodes if n.summary and n.summary.stragglers]
        # node 0's table before what another node heard of it (`lateness_report.relayed_lines`)
        tables.sort(key=lambda t: "decided_on" in t)
        if args.json:
            out.write(json.dumps(tables[0] if tables else None, indent=2) + "\n")
        else:
            out.write("\n".join(summary_lines(tables[0] if tables else None)) + "\n")
        return outcome.exit_code(job)
    if args.json:
        out.write(json.dumps(job_to_json(job), indent=2) + "\n")
    else:
        out.write(format_job(job, color=color) + "\n")
    return outcome.exit_code(job)


def _stacks(dirs: list[str], as_json: bool, out: TextIO) -> int:
    """--stacks: collect, write and print for the job's node directories on this machine."""
    from paddlike.logs.stacks import dump_job, stacks_to_json

    try:
        found = node_dirs(dirs)
    except LogDirError as e:
        print(f"paddlike.logs: --stacks: {e}", file=sys.stderr)
        return 2
    if len(found) == 1:
        asked = _ask_launcher(found[0], as_json, out)
        if asked is not None:
            return asked
    dump = dump_job(found)
    if isinstance(dump, str):
        print(f"paddlike.logs: --stacks: {dump}", file=sys.stderr)
        return 2
    if as_json:
        data = {"paths": [str(p) for p in dump.paths], "summary": dump.lines}
        data["stacks"] = stacks_to_json(dump.stacks)
        out.write(json.dumps(data, indent=2) + "\n")
        return 0
    out.write("\n".join(dump.lines) + "\n")
    for path in dump.paths:
        if dump.stacks:
            ranks = sum(1 for p in path.glob("rank.*.txt"))
            out.write(f"stacks of {ranks} rank{'' if ranks == 1 else 's'} in {path}\n")
        else:
            out.write(f"progress and flight records in {path}\n")
    return 0


def _ask_launcher(log_dir: str, as_json: bool, out: TextIO) -> int | None:
    """While a launcher runs the job here, it takes the stacks (SIGRTMIN+4): it knows its
    workers. None when there is no such launcher, or it wrote nothing in time."""
    from paddlike.logs.ask import ask_launcher, launcher_pid

    pid = launcher_pid(log_dir)
    if pid is None:
        return None
    path = ask_launcher(log_dir, pid)
    if isinstance(path, str):
        print(f"paddlike.logs: --stacks: {path}", file=sys.stderr)
        return None
    data = json.loads(read_regular_text(path / "stacks.json"))
    if as_json:
        out.write(json.dumps({"paths": [str(path)], **data}, indent=2) + "\n")
        return 0
    out.write("\n".join(data["summary"]) + "\n")
    n = len(data["stacks"])
    out.write(f"stacks of {n} rank{'' if n == 1 else 's'} in {path}\n")
    return 0


def label_filter(role: str, rank: int | None) -> Callable[[str], bool]:
    """Which `--follow` labels ('[trainer 1]', or '[nodeb trainer #0]' without a summary)
    --role/--rank select; without a summary the local index stands in for the rank."""

    def wanted(label: str) -> bool:
        words = label.strip("[]").split()
        if len(words) < 2 or words[-2] != role:
            return False
        return rank is None or words[-1].lstrip("#") == str(rank)

    return wanted


def _follow(dirs: list[str], args: argparse.Namespace, out: TextIO, color: bool) -> int:
    only = None
    if args.rank is not None or args.role is not None:
        only = label_filter(args.role or "trainer", args.rank)
    follower = Follower(
        [Path(d) for d in node_dirs(dirs)],
        out,
        color=color,
        tail=10 if args.tail is None else args.tail,
        only=only,
    )
    try:
        ended = follower.run()
    except KeyboardInterrupt:
        out.flush()
        return 130
    if ended == "orphaned":
        print(
            "paddlike.logs: stopped following: the summary says running but no process of the "
            "job is alive (its launcher was killed, or is gone without recording the end)",
            file=sys.stderr,
        )
    return outcome.exit_code(load(dirs))


if __name__ == "__main__":
    sys.exit(main())
