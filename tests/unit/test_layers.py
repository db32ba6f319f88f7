"""The module graph stays acyclic, the core stays sans-IO, and every import in the
core points down the declared order of its rooms (broker.core.ROOMS).

Every import counts: at module level, inside functions, and under TYPE_CHECKING.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("broker", "client", "schemas")
CORE_FORBIDDEN = {"zmq", "apsw", "structlog", "threading", "time", "logging", "socket", "asyncio"}


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


def _room(mod: str) -> str | None:
    parts = mod.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["broker", "core"] else None


def _upward(graph: dict[str, set[str]], rooms: tuple[str, ...]) -> list[str]:
    """Every import of a core module from a room later in ``rooms`` than its own."""
    rank = {room: i for i, room in enumerate(rooms)}
    return sorted(f"{mod} ({_room(mod)}) imports {target} ({_room(target)})"
                  for mod, targets in graph.items() if _room(mod)
                  for target in targets if _room(target)
                  and rank[_room(target)] > rank[_room(mod)])


def test_every_core_import_points_down_the_declared_order_of_rooms():
    from broker.core import ROOMS
    graph, _ = _graph()
    rooms = {_room(mod) for mod in graph} - {None}
    assert rooms == set(ROOMS), "every room is in the order, and only rooms"
    assert _upward(graph, ROOMS) == []


def test_the_order_check_finds_an_import_that_points_up():
    graph = {"broker.core.kernel.state": {"broker.core.sessions.registry"},
             "broker.core.sessions.registry": {"broker.core.kernel.records"},
             "broker.core.kernel.records": set()}
    assert _upward(graph, ("kernel", "sessions")) == [
        "broker.core.kernel.state (kernel) imports broker.core.sessions.registry (sessions)"]
    assert _upward(graph, ("sessions", "kernel")) == [
        "broker.core.sessions.registry (sessions) imports broker.core.kernel.records (kernel)"]
