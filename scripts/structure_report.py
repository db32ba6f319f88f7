"""Figures on the shape of the code, for before/after comparisons of a restructure.

    python3 scripts/structure_report.py [ROOT]

Prints, for broker/core: modules per folder, lines per module (median, max, over 300),
floors (the longest chain of imports inside the core, so a module that imports nothing
of the core is floor 1), and how many core modules outside broker/core/cluster mention
another broker: by word (``cluster``, ``forwarding``, ``ownership``, ``Parked``,
``mirror``, ``link``, comments and docstrings included: crude), by code (an import of
``broker.core.cluster``, or a read of ``state.cluster``), and the modules that import
the cluster outside it.
"""

from __future__ import annotations

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


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    files = sorted((root / "broker" / "core").rglob("*.py"))
    mods = {module_name(root, p): p for p in files}
    known = {m for m, p in mods.items() if p.name != "__init__.py"}
    graph = {m: core_imports(m, p.name == "__init__.py", ast.parse(p.read_text()), known)
             for m, p in mods.items() if m in known}

    @lru_cache(maxsize=None)
    def floor(m: str) -> int:
        return 1 + max((floor(d) for d in graph[m] if d != m), default=0)

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
    return 0


if __name__ == "__main__":
    sys.exit(main())
