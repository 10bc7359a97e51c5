"""Records `parse_options` calls and what they gave: the golden data of
test_recorded_parses.py (recorded_parses.json), made on the code before the options were
declared once (issue 33), so that the refactor is checked against it.

    .venv/bin/python tests/launch/context/options/record_parses.py [HARVESTED.jsonl ...]
    .venv/bin/python tests/launch/context/options/record_parses.py --new-option

`--new-option`: after adding an option (a row of our_table.py and its field), record only
its default (the base record) and the new --help; every recorded call stays as it was, so
the check still holds the other options to what they gave.

HARVESTED files are (argv, environ) lines caught from the test suite's own calls (a
pytest plugin wrapping parse_options); the rest of the corpus is made here: every
spelling of every option with a good and a bad value, every variable that feeds one,
the other launchers' options, and the command lines of the docs. A call whose result
depends on something outside argv and environ (a file, the time) is left out: each is
parsed twice, in two processes' worth of state, and kept only when both agree.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[3]
DATA = HERE / "recorded_parses.json"

# a value each option takes, and one it refuses
GOOD = {
    "nproc_per_node": ["2", "gpu", "auto", "cpu"], "gpus": ["0,1", "cpu", "1"],
    "nnodes": ["2", "1:3", "2:2"], "ips": ["10.0.0.1,10.0.0.2", "127.0.0.1", "[fd00::1]"],
    "master": ["10.0.0.1:6170", "etcd://10.0.0.9:2379", "localhost:0"],
    "log_dir": ["L"], "max_restarts": ["3"], "run_mode": ["ps", "collective", "ps-heter"],
    "host": ["10.0.0.1"], "start_port": ["7000"], "job_id": ["j1"], "node_rank": ["1", "0"],
    "master_addr": ["10.0.0.1"], "master_port": ["29500"], "rdzv_timeout": ["60"],
    "heartbeat_timeout": ["5"], "rdzv_last_call": ["7"], "elastic_level": ["0", "1", "-1"],
    "elastic_timeout": ["20"], "job_token": ["s3cret"], "server_num": ["2"],
    "worker_num": ["2"], "servers": ["10.0.0.1:7000,10.0.0.2:7000"],
    "workers": ["10.0.0.1,10.0.0.2"], "heter_workers": ["10.0.0.3:7100;10.0.0.4:7200"],
    "heter_worker_num": ["1;2"], "heter_devices": ["gpu;cpu"], "hostfile": ["hf"],
    "include": ["h1:0,1@h2"], "exclude": ["h3"], "num_nodes": ["2"], "num_gpus": ["2"],
    "slots": ["4"], "launcher": ["pdsh", "slurm"], "export": ["NCCL_DEBUG,HF_HOME"],
    "export_prefixes": ["NCCL", "none"], "remote_python": ["/usr/bin/python3"],
    "ssh_args": ["-F cfg"], "ssh_port": ["2222"], "console": ["all", "0,1", "none"],
    "kill_timeout": ["0", "12.5"], "hang_timeout": ["60"], "on_hang": ["abort"],
    "signals_to_handle": ["SIGTERM,USR1"], "numa_binding": ["node", "none"],
    "bind_core_list": ["0-3,8"], "gpu_log_interval": ["10"], "job_token_file": [],
}  # fmt: skip
BAD = {
    "nproc_per_node": ["x", "0", "xpu"], "gpus": ["a", "0,0", "gpu"], "nnodes": ["0", "3:2", "a:b"],
    "ips": ["", "a,,b", "[x]"], "master": ["nope", "etcd://", "[fd00::1]"], "log_dir": [""],
    "max_restarts": ["-1"], "run_mode": ["x"], "host": [""], "start_port": ["70000", "x"],
    "job_id": [""], "node_rank": ["-1"], "master_addr": [""], "master_port": ["0"],
    "rdzv_timeout": ["0", "inf", "nan"], "heartbeat_timeout": ["-1"], "rdzv_last_call": ["x"],
    "elastic_level": ["2"], "elastic_timeout": ["-1"], "job_token": [""],
    "server_num": ["0"], "worker_num": ["x"], "servers": ["a", "a:1;b:2", "a:1,a:1"],
    "workers": [""], "heter_workers": ["a"], "heter_worker_num": ["1;x"],
    "heter_devices": ["tpu"], "hostfile": [""], "include": [""], "exclude": [""],
    "num_nodes": ["0"], "num_gpus": ["-2"], "slots": ["x"], "launcher": ["mpich", "x"],
    "export": ["1A"], "export_prefixes": ["a b"], "remote_python": [""], "ssh_args": [""],
    "ssh_port": ["0"], "console": ["x", "0,0"], "kill_timeout": ["-1"],
    "hang_timeout": ["0"], "on_hang": ["x"], "signals_to_handle": ["SIGKILL", "FOO", "RTMIN"],
    "numa_binding": ["x"], "bind_core_list": ["3-1"], "gpu_log_interval": ["0"],
    "job_token_file": [""],
}  # fmt: skip
COMPAT_VALUES = ["x", "1", "0", "true", "false", "spawn", "null", "info", "default",
                 "static", "c10d", "etcd", "10.0.0.1:2379", "join_timeout=5,last_call_timeout=2",
                 "keep_alive_interval=2", "is_host=1", "gloo", "nccl", "auto", "trainer", "3",
                 "0:3,1:1", "none", "2"]  # fmt: skip
SWITCH_WORDS = ["1", "true", "no", "", "maybe"]


def corpus() -> list[dict]:
    from paddlike.launch.context.options import our_table
    from paddlike.launch.context.options import their_table as others

    calls: list[dict] = []

    def add(argv: list[str], env: dict[str, str] | None = None) -> None:
        calls.append({"argv": argv, "env": env or {}})

    add(["t.py"])
    add([])
    add(["--dry_run"])
    for option in our_table.OPTIONS:
        dest = option.dest
        for sp in option.flags:
            if option.switch:
                add([sp, "t.py"])
                add([sp + "=1", "t.py"])
                continue
            for v in GOOD.get(dest, []) + BAD.get(dest, []):
                add([sp, v, "t.py"])
                add([sp + "=" + v, "t.py", "a"])
            add([sp])
            add([sp, "--dry_run", "t.py"])
            if sp.startswith("--") and "_" in sp:
                add([sp.replace("_", "-"), (GOOD.get(dest) or ["x"])[0], "t.py"])
            if sp.startswith("--") and len(sp) > 6:
                add([sp[:-1], (GOOD.get(dest) or ["x"])[0], "t.py"])
        var = "PADDLIKE_" + dest.upper()
        words = SWITCH_WORDS if option.switch else GOOD.get(dest, []) + BAD.get(dest, [])
        for v in words:
            add(["t.py"], {var: v})
            for theirs in option.variables:
                add(["t.py"], {theirs: v})
                add(["t.py"], {theirs: v, "PADDLIKE_JOB_ID": "outer"})
                add(["t.py"], {theirs: v, "PADDLE_TRAINERS": "10.0.0.1,10.0.0.2"})
                add(["t.py"], {theirs: v, var: (GOOD.get(dest) or ["1"])[0]})
    for name in sorted(others.COMPAT_OPTIONS):
        if name in others.COMPAT_SWITCHES:
            add([f"--{name}", "t.py"])
            add([f"--{name}=1", "t.py"])
            add(["t.py"], {"PET_" + name.upper(): "1"})
            add(["t.py"], {"PADDLIKE_" + name.upper(): "maybe"})
            continue
        add([f"--{name}"])
        for v in COMPAT_VALUES:
            add([f"--{name}", v, "t.py"])
            add([f"--{name.replace('_', '-')}={v}", "t.py"])
            if name in others.TORCHRUN_OPTIONS:
                add(["t.py"], {"PET_" + name.upper(): v})
            add(["t.py"], {"PADDLIKE_" + name.upper(): v})
            if name in others.PADDLE_OPTION_VARIABLES:
                add(["t.py"], {others.PADDLE_OPTION_VARIABLES[name]: v})
    for short in ("-t", "-r"):
        for v in ("0", "1", "2", "3", "0:3,1:1", "1,2", "x", "0:3,0:1"):
            add([short, v, "t.py"])
            add([short + v, "t.py"])
            add([short, v, "--local_ranks_filter", "0", "t.py"])
    for v in ("true", "false", "1", "maybe"):
        add(["--log_overwrite", v, "t.py"])
        add([f"--log_overwrite={v}", "t.py"])
    add(["--nproc_per_nod", "2", "t.py"])
    add(["--nprocs_per_node", "2", "t.py"])
    add(["--ma", "x", "t.py"])
    add(["--rdzv-endp=h:1", "t.py"])
    add(["-nproc_per_node", "2", "t.py"])
    add(["--unknown", "t.py"])
    add(["--help"])
    add(["--version"])
    add(["PADDLE_PORT"], {"PADDLE_PORT": "7000", "TRAINER_PORTS_NUM": "4"})
    add(["t.py"], {"PADDLE_PORT": "x", "TRAINER_PORTS_NUM": "4"})
    add(["t.py"], {"PADDLE_ELASTIC_SERVER": "10.0.0.9:2379", "PADDLE_ELASTIC_NP": "2"})
    etcd_service = {"PADDLE_ELASTIC_ETCD_SERVICE_HOST": "e"}
    etcd_service["PADDLE_ELASTIC_ETCD_SERVICE_PORT"] = "1"
    add(["t.py"], etcd_service)
    add(["--enable_gpu_log", "true", "t.py"])
    add(["--enable_gpu_log", "false", "--gpu_log_interval", "3", "t.py"])
    add(["--backend", "nccl", "--devices", "cpu", "t.py"])
    add(["--run_path", "-m", "t.py"])
    add(["--bind_core_list", "0-3", "t.py"])
    add(["--bind_cores_to_rank", "--bind_core_list", "0-3", "t.py"])
    add(["--master", "a:1", "--rdzv_endpoint", "b:2", "t.py"])
    add(["--master", "b:2", "--rdzv_endpoint", "b:2", "t.py"])
    add(["--rdzv_backend", "etcd", "t.py"])
    add(["--rdzv_backend", "etcd", "--rdzv_endpoint", "e:x", "t.py"])
    add(["--job_token", "a", "--job_token_file", "f", "t.py"])
    add(["--job_token_file", "/nonexistent/token", "t.py"])
    for argv in docs_examples():
        add(argv)
    return calls


def docs_examples() -> list[list[str]]:
    """The launcher's command lines in the README and docs/ (their options, a script)."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = page.read_text().replace("\\\n", " ")
        for line in text.splitlines():
            m = re.search(r"(?:python3? -m paddlike\.launch|paddlike-launch)\s+(.*)", line)
            if not m:
                continue
            rest = re.split(r"\s(?:\||&&|;|#|>)\s|`", m.group(1))[0]
            try:
                argv = shlex.split(rest)
            except ValueError:
                continue
            if argv and "..." not in argv:
                found.append(argv)
    return found


def outcome(argv: list[str], env: dict[str, str]) -> dict:
    """What parse_options gave, as JSON: the record, or the error line and exit code."""
    import contextlib
    import io

    from paddlike.launch.context.options import UsageError, parse_options

    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            options = parse_options(argv, env)
    except UsageError as bad:
        return {"error": str(bad), "option": bad.option, "exit": bad.exit_code}
    except SystemExit as done:
        return {"exit": done.code, "printed": bool(out.getvalue())}
    return {"record": jsonable(options._asdict())}


def help_text() -> str:
    """--help as printed at 100 columns by `python -m paddlike.launch`."""
    import os
    from unittest import mock

    from paddlike.launch.context.options import build_parser

    with (
        mock.patch.dict(os.environ, {"COLUMNS": "100"}),
        mock.patch.object(sys, "argv", ["launch.py"]),
    ):
        return build_parser().format_help()


def compact(result: dict, base: dict) -> dict:
    """A record as the fields where it differs from `base` (`["t.py"]`'s record)."""
    if "record" not in result:
        return result
    return {"record": {k: v for k, v in result["record"].items() if base.get(k, k) != v}}


def jsonable(value: object) -> object:
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (tuple, list, frozenset, set)):
        return [jsonable(v) for v in value]
    return value


def main(harvested: list[str]) -> None:
    calls = corpus()
    for path in harvested:
        calls.extend(json.loads(line) for line in Path(path).read_text().splitlines())
    seen, unique = set(), []
    for call in calls:
        key = json.dumps(call, sort_keys=True)
        if key not in seen:
            seen.add(key)
            unique.append(call)
    base = outcome(["t.py"], {})["record"]
    kept = []
    for call in unique:
        first = outcome(call["argv"], call["env"])
        if outcome(call["argv"], call["env"]) == first and "/tmp" not in json.dumps(first):
            kept.append({**call, **compact(first, base)})
    write({"base": base, "help": help_text(), "calls": kept})
    print(f"{len(kept)} calls recorded ({len(unique) - len(kept)} left out) in {DATA}")


def new_option() -> None:
    """The base record and --help as they are now; the recorded calls kept."""
    data = json.loads(DATA.read_text())
    data["base"] = outcome(["t.py"], {})["record"]
    data["help"] = help_text()
    write(data)
    print(f"base record and --help recorded anew in {DATA}")


def write(data: dict) -> None:
    text = json.dumps(data, separators=(",", ":"), sort_keys=True)
    DATA.write_text(text.replace(',{"argv"', ',\n{"argv"') + "\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--new-option"]:
        new_option()
    else:
        main(sys.argv[1:])
