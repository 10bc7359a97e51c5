"""The package's imports, as README's "Architecture" section draws them.

Inside `paddlike.launch` folders are stages and imports point one way,

    main -> cluster -> run -> health -> console | peers -> plan -> context

so the pure stages (plan, context) cannot reach the side effects, not even for a type
(imports under `if TYPE_CHECKING:` count), and no chain of imports that run inside the
launcher is longer than six modules. Between the packages:

- `launch` imports from outside itself only LAUNCH_MAY_IMPORT (standard library only,
  start-up time is a feature), and LAUNCH_MAY_IMPORT_LAZILY only inside a function,
  when a hang is looked for; what it may import imports nothing else of paddlike;
- `distributed` imports `launch` only from DISTRIBUTED_DRIVES_LAUNCH, which drive the
  launcher's pipeline as a library;
- `logs` never imports `launch`; `contract` and `summary` import nothing of paddlike;
- no import cycle anywhere in `paddlike/`, counting every import: at module level,
  inside functions, and under `if TYPE_CHECKING:` (a cycle of type-only imports is
  still two modules that cannot be read apart).

KNOWN_CYCLES and KNOWN_VIOLATIONS are what is still wrong. They may only shrink: an
entry that is no longer true fails the test, so whoever fixes one removes it here.
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import NamedTuple

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "paddlike"

# What `paddlike.launch` may import from the rest of paddlike (a name covers its submodules).
LAUNCH_MAY_IMPORT = (
    "paddlike",  # the root package, for __version__ (it imports nothing)
    "paddlike.contract",
    "paddlike.summary",
    "paddlike.logformat",  # the log directory's files, written by launch, read by logs
    "paddlike.commands",  # both commands' manners: the name typed, a closed stdout
    "paddlike.netaddr",  # host:port texts, IPv6 bracketed (stdlib only)
    "paddlike.distributed.store",
    "paddlike.logs.report",
    "paddlike.logs.first_error",  # the first error line of a failure (stdlib only, like report)
    "paddlike.logs.worker_probe",  # the hang probe's directory and environment (stdlib only)
)
# ... and only inside a function, when a hang is looked for (they are heavier).
LAUNCH_MAY_IMPORT_LAZILY = (
    "paddlike.logs.hang",
    "paddlike.logs.stacks",
    "paddlike.distributed.progress",
    "paddlike.distributed.preempt",  # at a preemption notice: the ranks' stop step
    "paddlike.logs.lateness",  # --straggler_check's decision (issue 37)
    "paddlike.logs.torch_flight",  # ... and torch's flight record read through the probes
)
DISTRIBUTED_DRIVES_LAUNCH = ("paddlike.distributed.spawn", "paddlike.distributed.nodelist")
# shared by all: import nothing of paddlike but each other (summary.json is written through
# logformat's one atomic write)
LEAVES = (
    "paddlike.contract",
    "paddlike.summary",
    "paddlike.commands",
    "paddlike.logformat",
    "paddlike.netaddr",
)

# a launch stage may import the stages of a lower number (and its own)
# (cluster, the one-command start, drives whole launchers: it may use run's signal tables)
STAGES = {
    "context": 0,
    "plan": 1,
    "peers": 2,
    "console": 2,
    "health": 3,  # the pre-flight check: between the nodes' meeting (peers) and the run
    "run": 4,
    "cluster": 5,
    "specs": 6,  # the narrow records made from the options, for main
    "main": 7,
    "__main__": 8,
}
MAX_CHAIN = 6

# Import cycles not fixed yet: each a set of modules that import each other (directly or
# round about). Issue 22 removes them; remove an entry with its fix.
KNOWN_CYCLES: set[frozenset[str]] = set()
# Imports against the package rules above, not fixed yet: (importer, imported).
KNOWN_VIOLATIONS: set[tuple[str, str]] = set()


class Import(NamedTuple):
    importer: str
    imported: str
    line: int
    lazy: bool  # inside a function: runs when called, not when the importer is imported
    type_only: bool  # under `if TYPE_CHECKING:`: never runs

    def __str__(self) -> str:
        how = " (type only)" if self.type_only else " (in a function)" if self.lazy else ""
        return f"{self.importer}:{self.line} imports {self.imported}{how}"


def module_files(package: Path) -> dict[str, Path]:
    """Every module and package of `package` by its dotted name."""
    out = {}
    for path in package.rglob("*.py"):
        rel = path.relative_to(package.parent).with_suffix("")
        out[".".join(p for p in rel.parts if p != "__init__")] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


Statement = tuple[ast.Import | ast.ImportFrom, bool, bool]  # the import, lazy, type_only


def _visit(node: ast.AST, lazy: bool = False, type_only: bool = False) -> Iterator[Statement]:
    """Every import statement at or under `node`, with whether it is lazy or type-only."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node, lazy, type_only
        return
    if isinstance(node, ast.If) and _is_type_checking(node.test):
        for stmt in node.body:
            yield from _visit(stmt, lazy, True)
        for stmt in node.orelse:
            yield from _visit(stmt, lazy, type_only)
        return
    inner = lazy or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
    for child in ast.iter_child_nodes(node):
        yield from _visit(child, inner, type_only)


def imports_of(
    name: str, source: str, is_package: bool, modules: Mapping[str, object]
) -> set[Import]:
    """The paddlike modules that module `name` imports: `from a import b` names module
    `a.b` when there is one, else `a`; relative imports are resolved."""
    found: set[Import] = set()
    for stmt, lazy, type_only in _visit(ast.parse(source)):
        targets: list[str] = []
        if isinstance(stmt, ast.ImportFrom):
            base = stmt.module or ""
            if stmt.level:
                parts = name.split(".") if is_package else name.split(".")[:-1]
                parts = parts[: len(parts) - stmt.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in stmt.names:
                sub = f"{base}.{alias.name}"
                targets.append(sub if sub in modules else base)
        else:
            targets = [alias.name for alias in stmt.names]
        for target in targets:
            while target and target not in modules:  # `import a.b.c` of a package's name
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(Import(name, target, stmt.lineno, lazy, type_only))
    return found


@functools.cache
def package_imports() -> tuple[Import, ...]:
    modules = module_files(PACKAGE)
    return tuple(
        sorted(
            i
            for name, path in modules.items()
            for i in imports_of(name, path.read_text(), path.name == "__init__.py", modules)
        )
    )


def cycles(graph: Mapping[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.add(frozenset(component))
    return found


def _graph(imports: tuple[Import, ...], *, type_only: bool = True) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for i in imports:
        if type_only or not i.type_only:
            graph.setdefault(i.importer, set()).add(i.imported)
    return graph


def _within(module: str, names: tuple[str, ...]) -> bool:
    """`module` is one of `names`, or inside one of them (the root "paddlike" only itself)."""
    return any(module == n or (n != "paddlike" and module.startswith(n + ".")) for n in names)


def rule_breaks(imports: tuple[Import, ...]) -> set[Import]:
    """Every import against the package rules (the launch stages aside)."""
    allowed = LAUNCH_MAY_IMPORT + LAUNCH_MAY_IMPORT_LAZILY
    broken = set()
    for i in imports:
        if i.type_only:
            continue
        launch_to = _within(i.imported, ("paddlike.launch",))
        if _within(i.importer, ("paddlike.launch",)) and not launch_to:
            lazy_only = _within(i.imported, LAUNCH_MAY_IMPORT_LAZILY)
            if not _within(i.imported, allowed) or (lazy_only and not i.lazy):
                broken.add(i)
        elif _within(i.importer, LAUNCH_MAY_IMPORT) and not _within(i.imported, LAUNCH_MAY_IMPORT):
            broken.add(i)  # what launch imports at start-up brings nothing more with it
        elif _within(i.importer, ("paddlike.distributed",)) and launch_to:
            if not _within(i.importer, DISTRIBUTED_DRIVES_LAUNCH):
                broken.add(i)
        elif _within(i.importer, ("paddlike.logs",)) and launch_to:
            broken.add(i)
        if _within(i.importer, LEAVES) and not _within(i.imported, LEAVES):
            broken.add(i)
    return broken


# --- the package ------------------------------------------------------------------------


def test_no_import_cycle_in_the_package_but_the_known_ones_each_still_there() -> None:
    imports = package_imports()
    found = cycles(_graph(imports))
    new = [c for c in found if not any(c <= known for known in KNOWN_CYCLES)]
    inside = [str(i) for i in imports if any({i.importer, i.imported} <= c for c in new)]
    assert not new, "new import cycle(s):\n  " + "\n  ".join(inside)
    stale = [sorted(known) for known in KNOWN_CYCLES if known not in found]
    now = [sorted(c) for c in found if c not in KNOWN_CYCLES]
    assert not stale, f"KNOWN_CYCLES is out of date (fixed or shrunk): {stale}; now: {now}"


def test_the_packages_import_each_other_only_as_the_architecture_says() -> None:
    broken = rule_breaks(package_imports())
    new = sorted(str(i) for i in broken if (i.importer, i.imported) not in KNOWN_VIOLATIONS)
    assert not new, "imports against the package rules:\n  " + "\n  ".join(new)
    gone = KNOWN_VIOLATIONS - {(i.importer, i.imported) for i in broken}
    assert not gone, f"fixed, remove from KNOWN_VIOLATIONS: {sorted(gone)}"


# --- inside the launcher ----------------------------------------------------------------


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "launch" else None


def _inside_launch(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    return {
        name: {m for m in imported if m.startswith("paddlike.launch.")}
        for name, imported in graph.items()
        if name.startswith("paddlike.launch.")
    }


LAUNCH_IMPORTS = _inside_launch(_graph(package_imports()))  # type-only ones too
LAUNCH_RUNTIME = _inside_launch(_graph(package_imports(), type_only=False))
LAUNCH_MODULES = sorted(m for m in module_files(PACKAGE) if m.startswith("paddlike.launch."))


@pytest.mark.parametrize("module", [m for m in LAUNCH_MODULES if _stage(m) in STAGES])
def test_a_module_imports_only_its_own_stage_and_the_stages_after_it(module: str) -> None:
    mine = STAGES[_stage(module)]  # type: ignore[index]
    wrong = [
        m
        for m in sorted(LAUNCH_IMPORTS.get(module, ()))
        if _stage(m) in STAGES and _stage(m) != _stage(module) and STAGES[_stage(m)] >= mine  # type: ignore[index]
    ]
    flow = "main -> cluster -> run -> health -> console|peers -> plan -> context"
    assert not wrong, f"{module} imports {wrong}: against the flow {flow}"


def test_no_chain_of_imports_inside_the_launcher_is_longer_than_six() -> None:
    @functools.cache
    def longest(module: str, path: tuple[str, ...] = ()) -> tuple[str, ...]:
        assert module not in path, "import cycle: " + " -> ".join((*path, module))
        below = [longest(m, (*path, module)) for m in sorted(LAUNCH_RUNTIME.get(module, ()))]
        return (module, *max(below, key=len, default=()))

    # __main__ is the `python -m` shim that calls main(): the chains start at main
    chain = max((longest(m) for m in LAUNCH_MODULES if not m.endswith("__main__")), key=len)
    assert len(chain) <= MAX_CHAIN, f"a chain of {len(chain)}: " + " -> ".join(chain)


def test_the_launcher_imports_no_numpy_cupy_or_zmq() -> None:
    code = (
        "import sys, paddlike.launch.main, paddlike.launch.run.job;"
        "print(sorted(m for m in ('numpy', 'cupy', 'zmq') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


# --- the checks above can fail ------------------------------------------------------------

_SAMPLE = """
from __future__ import annotations
import paddlike.b.c
from . import sibling
from ..b import c as alias
TYPE_CHECKING = False
if TYPE_CHECKING:
    from paddlike.b import only_typed
else:
    import paddlike.b
def later():
    from paddlike.b.c import name_in_c
"""


def test_the_graph_sees_relative_lazy_and_type_only_imports() -> None:
    modules = dict.fromkeys(
        [
            "paddlike.a",
            "paddlike.a.mod",
            "paddlike.a.sibling",
            "paddlike.b",
            "paddlike.b.c",
            "paddlike.b.only_typed",
        ]
    )
    found = {
        (i.imported, i.line, i.lazy, i.type_only)
        for i in imports_of("paddlike.a.mod", _SAMPLE, False, modules)
    }
    assert found == {
        ("paddlike.b.c", 3, False, False),
        ("paddlike.a.sibling", 4, False, False),
        ("paddlike.b.c", 5, False, False),
        ("paddlike.b.only_typed", 8, False, True),
        ("paddlike.b", 10, False, False),
        ("paddlike.b.c", 12, True, False),
    }


def test_cycles_are_the_groups_of_modules_that_import_each_other() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert cycles(graph) == {frozenset("abc"), frozenset("de")}
    assert cycles({"a": {"b"}, "b": set()}) == set()


def test_the_rules_name_an_import_of_launch_from_logs_and_of_run_from_the_launcher() -> None:
    imports = (
        Import("paddlike.logs.x", "paddlike.launch.run.job", 1, False, False),
        Import("paddlike.launch.run.job", "paddlike.logs.hang", 2, False, False),
        Import("paddlike.launch.run.job", "paddlike.logs.hang", 3, True, False),
        Import("paddlike.distributed.spawn", "paddlike.launch.main", 4, True, False),
        Import("paddlike.distributed.env", "paddlike.launch.main", 5, False, False),
        Import("paddlike.logs.report", "paddlike.logs.reader", 6, False, False),
        Import("paddlike.summary", "paddlike.logs.reader", 7, False, False),
        Import("paddlike.summary", "paddlike.logformat", 8, False, False),  # leaf to leaf
    )
    assert sorted(i.line for i in rule_breaks(imports)) == [1, 2, 5, 6, 7]
