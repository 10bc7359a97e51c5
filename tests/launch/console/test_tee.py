"""The console echo's rank prefixes: dropped when one worker is echoed, kept on a host
started by the one-command cluster start when --console asks for many (its lines meet
every other host's on the starter's console)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from paddlike.launch.console.tee import TeeEcho
from paddlike.launch.plan.plan import ProcessSpec, Role

pytestmark = pytest.mark.timeout(30)


def _echoed(tmp_path: Path, selection: object, *, among_hosts: bool) -> str:
    """What the console shows of rank 3's one line, this host's only worker."""
    log = tmp_path / "workerlog.0"
    log.write_bytes(b"RANK 3 ready\n")
    spec = ProcessSpec(Role.TRAINER, 3, 0, (), "h:1", {}, ("python",), "workerlog.0")
    out = io.StringIO()
    echo = TeeEcho(out)
    echo.follow(spec, log, 0)
    echo.finish_setup(selection, among_hosts=among_hosts)  # type: ignore[arg-type]
    echo.flush()
    return out.getvalue()


def test_one_workers_echo_has_no_prefix_on_its_own(tmp_path: Path) -> None:
    assert _echoed(tmp_path, "all", among_hosts=False) == "RANK 3 ready\n"
    assert _echoed(tmp_path, frozenset({0}), among_hosts=True) == "RANK 3 ready\n"


def test_a_host_of_the_one_command_start_keeps_the_prefix_for_console_all(
    tmp_path: Path,
) -> None:
    assert _echoed(tmp_path, "all", among_hosts=True) == "[rank 3] RANK 3 ready\n"
    assert _echoed(tmp_path, frozenset({0, 1}), among_hosts=True) == "[rank 3] RANK 3 ready\n"
