"""The layout rules of docs/development.md, checked on the source: the DSL modules import each other
without a cycle, function-local imports in the DSL only break a real cycle and say which, and the
engine never imports strom.tasks (both build on strom.concurrency)."""

from __future__ import annotations

import ast
from pathlib import Path

import strom.streams

STREAMS = Path(strom.streams.__file__).parent
KSTREAM = STREAMS / "kstream"


def _module_name(path: Path) -> str:
    relative = path.relative_to(STREAMS.parent.parent).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


def _runtime_imports(tree: ast.Module) -> set[str]:
    """Modules imported when the module is loaded (top level, outside ``if TYPE_CHECKING``); ``from
    package import name`` counts ``package.name`` too, as the name may be a submodule."""
    imported: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
            imported.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    return imported


def _local_imports(tree: ast.Module) -> list[ast.ImportFrom | ast.Import]:
    """Imports inside functions and methods, each once (a nested function is inside its outer one)."""
    found: dict[int, ast.ImportFrom | ast.Import] = {}
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            found.update((id(node), node) for node in ast.walk(function)
                         if isinstance(node, ast.Import | ast.ImportFrom))
    return list(found.values())


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        stack.append(module)
        for dependency in sorted(graph[module]):
            if state.get(dependency) == 1:
                return [*stack[stack.index(dependency):], dependency]
            if dependency not in state and (cycle := visit(dependency)):
                return cycle
        stack.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


def test_the_dsl_modules_import_each_other_without_a_cycle():
    trees = {_module_name(path): ast.parse(path.read_text()) for path in KSTREAM.rglob("*.py")}
    graph = {name: _runtime_imports(tree) & set(trees) - {name} for name, tree in trees.items()}
    assert len(graph) > 20
    assert _find_cycle(graph) is None


def test_function_local_imports_in_the_dsl_are_few_and_give_their_reason():
    local = []
    for path in KSTREAM.rglob("*.py"):
        lines = path.read_text().splitlines()
        for node in _local_imports(ast.parse("\n".join(lines))):
            local.append((path.name, node.lineno, lines[node.lineno - 1]))
    assert len(local) < 5, local
    for name, line, text in local:
        assert "# cycle:" in text, f"{name}:{line} imports in a function without saying which cycle it breaks"


def test_the_engine_does_not_import_the_task_processors():
    offenders = []
    for path in STREAMS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            offenders.extend(f"{path.name}: {module}" for module in modules
                             if module == "strom.tasks" or module.startswith("strom.tasks."))
    assert offenders == []
