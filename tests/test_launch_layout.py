"""The launcher's package shows its flow: folders are stages and imports point one way.

    main -> run -> console | peers -> plan -> context

A module may import its own stage and the stages after it, never one before it (so
the pure stages, plan and context, cannot reach the side effects), and no chain of
imports inside `paddlike.launch` is longer than six modules.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

LAUNCH = Path(__file__).resolve().parent.parent / "paddlike" / "launch"
# a stage may import the stages of a lower number (and its own)
STAGES = {"context": 0, "plan": 1, "peers": 2, "console": 2, "run": 3, "main": 4, "__main__": 5}
MAX_CHAIN = 6


def _modules() -> dict[str, Path]:
    out = {}
    for path in LAUNCH.rglob("*.py"):
        rel = path.relative_to(LAUNCH).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        out[".".join(["paddlike", "launch", *parts])] = path
    return out


MODULES = _modules()


def _runtime_nodes(tree: ast.AST):  # type: ignore[no-untyped-def]
    """Every node except those under `if TYPE_CHECKING:` (never imported at run time)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            yield from (n for child in node.orelse for n in _runtime_nodes(child))
            continue
        yield node
        yield from _runtime_nodes(node)


def _imports(path: Path) -> set[str]:
    """Every paddlike.launch module that `path` imports at run time (lazy ones too)."""
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            for alias in node.names:
                if f"{base}.{alias.name}" in MODULES:
                    found.add(f"{base}.{alias.name}")
                elif base in MODULES:
                    found.add(base)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in MODULES)
    return {m for m in found if m.startswith("paddlike.launch.")}


GRAPH = {name: _imports(path) - {name} for name, path in MODULES.items()}


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else None


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _stage(m) in STAGES))
def test_a_module_imports_only_its_own_stage_and_the_stages_after_it(module: str) -> None:
    mine = STAGES[_stage(module)]
    wrong = [
        m
        for m in GRAPH[module]
        if _stage(m) in STAGES and _stage(m) != _stage(module) and STAGES[_stage(m)] >= mine
    ]
    flow = "main -> run -> console|peers -> plan -> context"
    assert not wrong, f"{module} imports {wrong}: against the flow {flow}"


def test_the_launcher_has_no_import_cycle_and_no_chain_longer_than_six() -> None:
    @functools.cache
    def longest(module: str, path: tuple[str, ...] = ()) -> int:
        assert module not in path, "import cycle: " + " -> ".join((*path, module))
        below = [longest(m, (*path, module)) for m in GRAPH[module]]
        return 1 + max(below, default=0)

    # __main__ is the `python -m` shim that calls main(): the chains start at main
    deepest = max((m for m in MODULES if not m.endswith("__main__")), key=longest)
    assert longest(deepest) <= MAX_CHAIN, f"{deepest} starts a chain of {longest(deepest)}"


def test_the_launcher_imports_no_numpy_cupy_or_zmq() -> None:
    import subprocess
    import sys

    code = (
        "import sys, paddlike.launch.main, paddlike.launch.run.job;"
        "print(sorted(m for m in ('numpy', 'cupy', 'zmq') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
