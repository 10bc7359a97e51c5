"""What every host's launcher gets in its environment: env files, then --export."""

from __future__ import annotations

import pytest

from paddlike.launch.cluster.envfile import carried_environment, parse_env_file
from paddlike.launch.context.options import UsageError


def test_later_files_win_and_export_wins_over_every_file(tmp_path) -> None:
    home, cwd = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    cwd.mkdir()
    (home / ".deepspeed_env").write_text("A=home-ds\nB=home-ds\nC=home-ds\nD=home-ds\n")
    (cwd / ".deepspeed_env").write_text("# comment\n\nB=cwd-ds\nC=cwd-ds\nD=cwd-ds\n")
    (home / ".paddlike_env").write_text("C=home-pl\nD=home-pl\n")
    (cwd / ".paddlike_env").write_text("D=cwd-pl=with=equals\n")
    for path in (*home.iterdir(), *cwd.iterdir()):
        path.chmod(0o600)
    carried = carried_environment(
        ("E",), {"E": "exported", "OTHER": "x"}, home=str(home), cwd=str(cwd)
    )
    assert carried == {
        "A": "home-ds",
        "B": "cwd-ds",
        "C": "home-pl",
        "D": "cwd-pl=with=equals",
        "E": "exported",
    }


def test_export_of_a_variable_this_shell_does_not_have_is_a_usage_error(tmp_path) -> None:
    with pytest.raises(UsageError, match="--export: NOPE is not set in this shell"):
        carried_environment(("NOPE",), {}, home=str(tmp_path), cwd=str(tmp_path))


def test_an_env_file_line_without_a_name_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"f line 2: expected NAME=VALUE, got 'not a pair'"):
        parse_env_file("A=1\nnot a pair\n", "f")


def test_an_env_file_others_can_read_or_write_is_refused(tmp_path) -> None:
    path = tmp_path / ".deepspeed_env"
    path.write_text("WANDB_API_KEY=secret123\n")
    path.chmod(0o644)
    message = (
        rf"^--hostfile: refused {path}, whose values every host gets as secrets: others can "
        r"read or write it \(mode 0644\): chmod 600 it$"
    )
    with pytest.raises(UsageError, match=message):
        carried_environment((), {}, home=str(tmp_path), cwd=str(tmp_path))
    path.chmod(0o600)
    assert carried_environment((), {}, home=str(tmp_path), cwd=str(tmp_path)) == {
        "WANDB_API_KEY": "secret123"
    }
