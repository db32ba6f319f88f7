"""The module graph stays acyclic and the core stays sans-IO.

Every import counts: at module level, inside functions, and under TYPE_CHECKING.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("broker", "client", "schemas")
CORE_FORBIDDEN = {"zmq", "apsw", "structlog", "threading", "time", "logging", "socket", "asyncio"}
# Where the engine is assembled: the only core modules outside broker.core.cluster that
# may import it (the handler, lifecycle and hook tables; the engine; State's fields).
CLUSTER_ASSEMBLY = {"broker.core.assembly.dispatch", "broker.core.assembly.engine",
                    "broker.core.assembly.state"}


def _modules() -> dict[str, Path]:
    mods = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = path
    return mods


def _imports(mod: str, path: Path) -> set[str]:
    """Every dotted name ``mod`` imports, anywhere in the file."""
    is_pkg = path.name == "__init__.py"
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                head = ".".join(base + ([node.module] if node.module else []))
            else:
                head = node.module or ""
            names |= {head} | {f"{head}.{alias.name}" for alias in node.names}
    return names


@functools.cache        # parsed once for the module's tests (every file of the project)
def _graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    raw: dict[str, set[str]] = {}
    for mod, path in mods.items():
        raw[mod] = _imports(mod, path)
        for name in raw[mod]:
            target = name
            while target and target not in mods:
                target = target.rpartition(".")[0]
            if target and target != mod and not mod.startswith(target + "."):
                graph[mod].add(target)
    return graph, raw


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = GREY
        stack.append(node)
        for nxt in sorted(graph[node]):
            if colour[nxt] == GREY:
                return stack[stack.index(nxt):] + [nxt]
            if colour[nxt] == WHITE:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        colour[node] = BLACK
        return None

    for node in sorted(graph):
        if colour[node] == WHITE:
            found = visit(node)
            if found:
                return found
    return None


def test_the_project_has_no_import_cycle():
    graph, _ = _graph()
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_core_imports_no_io_clock_thread_or_logging_module():
    _, raw = _graph()
    bad = sorted(f"{mod} imports {name}" for mod, names in raw.items() if mod.startswith("broker.core")
                 for name in names if name.split(".")[0] in CORE_FORBIDDEN)
    assert bad == []


def test_schemas_import_neither_side_and_the_client_not_the_broker():
    _, raw = _graph()
    bad = sorted(f"{mod} imports {name}" for mod, names in raw.items() for name in names
                 if (mod.startswith("schemas") and name.split(".")[0] in ("broker", "client"))
                 or (mod.startswith("client") and name.split(".")[0] == "broker"))
    assert bad == []


def test_a_core_room_imports_the_cluster_only_where_the_engine_is_assembled():
    _, raw = _graph()

    def in_cluster(name: str) -> bool:
        return name == "broker.core.cluster" or name.startswith("broker.core.cluster.")

    core = {mod for mod in raw if mod == "broker.core" or mod.startswith("broker.core.")}
    importers = {mod for mod in core - {m for m in core if in_cluster(m)}
                 if any(in_cluster(name) for name in raw[mod])}
    assert sorted(importers - CLUSTER_ASSEMBLY) == []
    assert "broker.core.assembly.dispatch" in importers    # the check sees the tables' imports
