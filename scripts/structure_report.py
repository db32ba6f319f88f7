"""Figures on the shape of the code, for before/after comparisons of a restructure.

    python3 scripts/structure_report.py [ROOT]
    python3 scripts/structure_report.py --rooms [ROOT]    # only the rooms' graph

Prints, for broker/core: modules per folder, lines per module (median, max, over 300),
floors (the longest chain of imports inside the core, so a module that imports nothing
of the core is floor 1), and how many core modules outside broker/core/cluster mention
another broker: by word (``cluster``, ``forwarding``, ``ownership``, ``Parked``,
``mirror``, ``link``, comments and docstrings included: crude), by code (an import of
``broker.core.cluster``, or a read of ``state.cluster``), and the modules that import
the cluster outside it.

Rooms (the folders under broker/core): the room-to-room imports, as pairs of rooms and
as import edges between modules, the rooms that lie on a cycle (and the edges on it),
the imports that point up the declared order (``broker.core.ROOMS``, read from the
source, when the tree has one) and the longest chain of imports, module by module.
"""

from __future__ import annotations

import argparse
import ast
import re
import statistics
import sys
from functools import lru_cache
from pathlib import Path

CLUSTER_WORDS = re.compile(r"\b(cluster|forwarding|ownership|Parked|mirrors?|links?)\b")


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def core_imports(mod: str, is_pkg: bool, tree: ast.AST, known: set[str]) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            names = [stem] + [f"{stem}.{a.name}" for a in node.names]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != mod:
                found.add(name)
    return found


def reads_cluster(tree: ast.AST) -> bool:
    """Whether the code reads an attribute ``cluster`` (``state.cluster``)."""
    return any(isinstance(node, ast.Attribute) and node.attr == "cluster" for node in ast.walk(tree))


def room(mod: str) -> str:
    return mod.split(".")[2]


def declared_rooms(root: Path) -> tuple[str, ...] | None:
    """``broker.core.ROOMS`` as written in the tree's source, or None without one."""
    init = root / "broker" / "core" / "__init__.py"
    for node in ast.walk(ast.parse(init.read_text())):
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "ROOMS" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    return None


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's components with more than one member (the cycles)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = set()
            while True:
                top = stack.pop()
                part.add(top)
                if top == node:
                    break
            if len(part) > 1:
                found.append(part)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def report_rooms(root: Path, graph: dict[str, set[str]], chain: list[str]) -> None:
    crossing = [(m, d) for m, deps in graph.items() for d in deps if room(m) != room(d)]
    pairs: dict[str, set[str]] = {}
    for m, d in crossing:
        pairs.setdefault(room(m), set()).add(room(d))
    rooms = sorted({room(m) for m in graph})
    room_graph = {r: pairs.get(r, set()) for r in rooms}
    print(f"rooms: {len(rooms)} ({', '.join(rooms)})")
    print(f"room-to-room imports: {sum(len(v) for v in room_graph.values())} pairs of rooms, "
          f"{len(crossing)} import edges between modules")
    for r in rooms:
        print(f"  {r} -> {', '.join(sorted(room_graph[r])) or '-'}")
    cycles = strongly_connected(room_graph)
    if not cycles:
        print("rooms on a cycle: none")
    for part in cycles:
        inner = sum(1 for r in part for d in room_graph[r] if d in part)
        edges = sum(1 for m, d in crossing if room(m) in part and room(d) in part)
        print(f"rooms on a cycle: {len(part)} ({', '.join(sorted(part))}), "
              f"{inner} pairs of rooms and {edges} import edges on it")
    order = declared_rooms(root)
    if order is None:
        print("declared order: none")
    else:
        rank = {r: i for i, r in enumerate(order)}
        up = [(m, d) for m, d in crossing if rank.get(room(d), -1) > rank.get(room(m), -1)]
        print(f"declared order: {' < '.join(order)}; imports pointing up it: {len(up)}")
        for m, d in up:
            print(f"  {m} -> {d}")
    print(f"longest chain of imports: {len(chain)} modules, "
          f"{len({room(m) for m in chain})} rooms: {' -> '.join(chain)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=".", help="the tree to read (default .)")
    parser.add_argument("--rooms", action="store_true", help="print only the rooms' graph")
    args = parser.parse_args()
    root = Path(args.root)
    files = sorted((root / "broker" / "core").rglob("*.py"))
    mods = {module_name(root, p): p for p in files}
    known = {m for m, p in mods.items() if p.name != "__init__.py"}
    graph = {m: core_imports(m, p.name == "__init__.py", ast.parse(p.read_text()), known)
             for m, p in mods.items() if m in known}

    @lru_cache(maxsize=None)
    def floor(m: str) -> int:
        return 1 + max((floor(d) for d in graph[m] if d != m), default=0)

    chain = [max(graph, key=floor)]
    while graph[chain[-1]]:
        chain.append(max(graph[chain[-1]], key=floor))
    if args.rooms:
        report_rooms(root, graph, chain)
        return 0

    lines = {m: len(p.read_text().splitlines()) for m, p in mods.items()}
    real = {m: n for m, n in lines.items() if not mods[m].name == "__init__.py" or n > 5}
    folders: dict[str, int] = {}
    for p in files:
        if p.name != "__init__.py":
            folders[str(p.parent.relative_to(root))] = folders.get(str(p.parent.relative_to(root)), 0) + 1
    mention = [m for m, p in mods.items()
               if ".cluster" not in m and CLUSTER_WORDS.search(p.read_text())]
    importing = sorted(m for m in graph if ".cluster" not in m
                       and any(d.startswith("broker.core.cluster") for d in graph[m]))
    reading = sorted(m for m, p in mods.items() if ".cluster" not in m and m not in importing
                     and reads_cluster(ast.parse(p.read_text())))
    print(f"core modules: {len(real)}  lines: {sum(lines.values())}")
    print(f"lines per module: median {statistics.median(real.values()):.0f}, "
          f"max {max(real.values())} ({max(real, key=real.get)}), "
          f"over 300: {sum(1 for n in real.values() if n > 300)}")
    print("folders: " + ", ".join(f"{k} {v}" for k, v in sorted(folders.items())))
    print(f"floors: {max(floor(m) for m in graph)}")
    print(f"core modules outside cluster/ that mention other brokers: {len(mention)} by word, "
          f"{len(importing) + len(reading)} in code")
    print(f"  import the cluster: {len(importing)} ({', '.join(importing)})")
    print(f"  read state.cluster: {len(reading)} ({', '.join(reading)})")
    report_rooms(root, graph, chain)
    return 0


if __name__ == "__main__":
    sys.exit(main())
