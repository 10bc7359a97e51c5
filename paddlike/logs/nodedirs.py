"""Finding a job's node directories in what the user names: a node's directory itself, a
parent with one sub-directory per node, or one directory the nodes shared (the first
node's files at its top, each other node's in a sub-directory of its own, named by its
address: paddlike.launch.run.logdir), found by their contents. Problems with the input
raise `LogDirError` whose message is the one line the command prints."""

from __future__ import annotations

import json
import os
from pathlib import Path

from paddlike.logformat import ENDPOINTS_FILE, match_log_name, read_regular_text
from paddlike.summary import SUMMARY_FILE


class LogDirError(Exception):
    """A directory that cannot be read as logs; str() is the one line to print."""



def _is_node_dir(names: list[str]) -> bool:
    return any(n in (SUMMARY_FILE, ENDPOINTS_FILE) or match_log_name(n) for n in names)


def listdir(path: Path) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        raise LogDirError(f"{path}: no such directory") from None
    except NotADirectoryError:
        raise LogDirError(f"{path}: not a directory (give a log directory, e.g. log/)") from None
    except PermissionError:
        raise LogDirError(f"{path}: permission denied (cannot list the directory)") from None
    except OSError as e:
        raise LogDirError(f"{path}: cannot read the directory: {e.strerror}") from None


def node_dirs(paths: list[str | os.PathLike[str]]) -> list[Path]:
    """The node directories in `paths`: each path itself, or its sub-directories per node."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        names = listdir(path)
        if _is_node_dir(names):
            found.extend(_with_shared(path, names))
            continue
        subdirs = [path / n for n in names if (path / n).is_dir()]
        nodes = [d for d in subdirs if _is_node_dir(_listdir_quiet(d))]
        if nodes:
            for node in nodes:
                found.extend(_with_shared(node, _listdir_quiet(node)))
        elif not names:
            raise LogDirError(f"{path}: the directory is empty (no job has written logs here)")
        else:
            raise LogDirError(
                f"{path}: no logs here (expected {SUMMARY_FILE}, {ENDPOINTS_FILE} or "
                "workerlog.N, or one such directory per node)"
            )
    return found


def _with_shared(path: Path, names: list[str]) -> list[Path]:
    """A node directory and the directories of the other nodes of its job inside it
    (a shared log directory): sub-directories holding a node's files. Those whose
    summary names another job than the top's, or a node the top or a later run of the
    same job covers, are earlier runs' leftovers and left out."""
    inside = [
        path / n
        for n in sorted(names)
        if not n.startswith(".") and (path / n).is_dir() and _is_node_dir(_listdir_quiet(path / n))
    ]
    if not inside:
        return [path]
    top = _peek_summary(path)
    latest: dict[object, tuple[float, Path]] = {}
    kept: list[Path] = [path]
    if top is not None and top[1] is not None:
        latest[top[1]] = (float("inf"), path)  # the top is the node it says it is
    for sub in inside:
        facts = _peek_summary(sub)
        if facts is None:  # a node still starting (or Paddle's): shown as it is
            kept.append(sub)
            continue
        job_id, node_index, start = facts
        if top is not None and top[0] and job_id and job_id != top[0]:
            continue  # an earlier job's node
        if node_index is None:
            kept.append(sub)
        elif node_index not in latest or latest[node_index][0] < start:
            latest[node_index] = (start, sub)
    kept.extend(p for _, p in latest.values() if p is not path)
    return kept


def _peek_summary(path: Path) -> tuple[str | None, int | None, float] | None:
    """(job id, node index, start time) from a directory's summary.json; None without one."""
    try:
        data = json.loads(read_regular_text(path / SUMMARY_FILE))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    index = data.get("node_index")
    start = data.get("start_time")
    return (
        data.get("job_id") if isinstance(data.get("job_id"), str) else None,
        index if isinstance(index, int) else None,
        float(start) if isinstance(start, (int, float)) else 0.0,
    )


def _listdir_quiet(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
