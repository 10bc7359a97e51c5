"""--preload's value: dotted module names, comma-separated; refused with --no_python."""

from __future__ import annotations

import pytest

from paddlike.launch.context.options import UsageError, parse_options


def parse(*argv: str, **env: str):
    return parse_options(list(argv), env)


@pytest.mark.parametrize(
    ("given", "modules"),
    [
        ("torch", ("torch",)),
        ("torch, numpy,torch", ("torch", "numpy")),
        ("transformers.models.llama", ("transformers.models.llama",)),
    ],
)
def test_preload_takes_module_names(given: str, modules: tuple[str, ...]) -> None:
    assert parse("--preload", given, "t.py").preload == modules
    assert parse("t.py", PADDLIKE_PRELOAD=given).preload == modules


def test_without_preload_no_module_is_preloaded() -> None:
    assert parse("t.py").preload == ()


@pytest.mark.parametrize("given", ["", "torch,", "my-module", "torch..nn", "1abc"])
def test_a_preload_value_that_is_no_module_name_is_refused(given: str) -> None:
    with pytest.raises(UsageError, match=r"^--preload: .*is not a module name; expected a"):
        parse("--preload", given, "t.py")


def test_preload_with_no_python_is_refused() -> None:
    with pytest.raises(UsageError, match=r"^--preload: needs a Python script; --no_python"):
        parse("--preload", "torch", "--no_python", "t.sh")


def test_a_script_given_as_preloads_value_is_named() -> None:
    """`--preload train.py`: the user's script, taken as the option's value."""
    with pytest.raises(UsageError, match=r"^training_script: missing \('t.py' was taken as the "
                       r"value of --preload\)"):  # fmt: skip
        parse("--preload", "t.py")
    with pytest.raises(UsageError, match=r"^--preload: t.py is a script's file name, not a"):
        parse("--preload", "torch,t.py", "t.py")
