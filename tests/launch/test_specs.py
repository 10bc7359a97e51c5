"""launch/specs.py: the stages after the options get narrow records, built once from the
options; no function of plan/ or run/ takes the whole options record."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from paddlike.launch.context.options import parse_options
from paddlike.launch.specs import elastic_spec, placement, plan_spec, run_spec

LAUNCH = Path(__file__).resolve().parents[2] / "paddlike" / "launch"


def _parameters_typed_options(stage: str) -> list[str]:
    """Every parameter of a function in `stage` whose annotation names LaunchOptions."""
    found = []
    for path in sorted((LAUNCH / stage).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = node.args
            for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs):
                if arg.annotation is not None and "LaunchOptions" in ast.unparse(arg.annotation):
                    found.append(f"{path.name}:{node.lineno} {node.name}({arg.arg})")
    return found


@pytest.mark.parametrize("stage", ["plan", "run"])
def test_no_function_of_the_plan_or_the_pipeline_takes_the_options_record(stage):
    assert _parameters_typed_options(stage) == []


def test_the_check_above_finds_a_parameter_typed_with_the_options_record():
    assert _parameters_typed_options("context/options")  # it can fail: parse_options has some


def test_the_plan_spec_carries_what_each_worker_is_told_and_runs():
    spec = plan_spec(
        parse_options(
            ["--role", "tr", "--max_restarts", "2", "--redirect_stdout_and_stderr",
             "--virtual_local_rank", "-m", "pkg.train", "--lr", "1"], {},
        )
    )  # fmt: skip
    assert (spec.role, spec.max_restarts, spec.split_logs, spec.virtual_local_rank) == (
        "tr", 2, True, True,
    )  # fmt: skip
    assert spec.argv("/py") == ("/py", "-u", "-m", "pkg.train", "--lr", "1")


def test_the_run_spec_carries_what_the_pipeline_needs():
    options = parse_options(
        ["--max_restarts", "3", "--log_dir", "logs", "--start_port", "7000",
         "--gpu_log_interval", "5", "--devices", "cpu", "train.py"], {},
    )  # fmt: skip
    spec = run_spec(options)
    assert (spec.max_restarts, spec.log_dir, spec.ports.start_port) == (3, "logs", 7000)
    assert spec.gpu_log is not None and spec.gpu_log.cpu_workers  # said once, nothing logged
    assert spec.etcd_master == "" and not spec.job_token_given


def test_a_fixed_job_has_no_elastic_spec_and_nothing_to_place():
    options = parse_options(["--nnodes", "2", "train.py"], {})
    assert elastic_spec(options) is None
    assert placement(options, None) is None
    elastic = ["--nnodes", "2:4", "--master", "10.0.0.1:6170", "train.py"]  # text only
    assert elastic_spec(parse_options(elastic, {})) is not None
