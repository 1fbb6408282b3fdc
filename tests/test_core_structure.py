"""The core's shape: no import circle between its modules (lazy imports inside functions included), no class over
300 lines and no function or method over 60 lines -- a rule read on one screen (issue 46)."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[1] / "src" / "wandb_rlcluster" / "core"
PACKAGE = "wandb_rlcluster.core"


def _imports(path: Path) -> set[str]:
    """The core modules ``path`` imports anywhere in its tree: at the top, inside a function, under ``if``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                base = node.module or ""
            elif node.level == 0 and node.module and node.module.startswith(PACKAGE + "."):
                base = node.module[len(PACKAGE) + 1:]
            elif node.level == 0 and node.module == PACKAGE:
                base = ""
            else:
                continue
            if base:
                out.add(base.split(".")[0])
            else:  # from . import a, b
                out.update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith(PACKAGE + "."):
                    out.add(a.name[len(PACKAGE) + 1:].split(".")[0])
    return out


def import_graph(core: Path = CORE) -> dict[str, set[str]]:
    mods = {p.stem for p in core.glob("*.py")}
    return {p.stem: {m for m in _imports(p) if m in mods and m != p.stem} for p in core.glob("*.py")}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_core_has_no_import_circle() -> None:
    graph = import_graph()
    assert {"gauge", "catalog", "cluster", "rule"} <= graph.keys()
    assert graph["cluster"], "the reader found no import in cluster.py"
    found = cycles(graph)
    assert not found, f"import circles in core/: {found}"


def test_the_cycle_reader_sees_a_lazy_import(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("from .b import x\n")
    (tmp_path / "b.py").write_text("def f():\n    from .a import y\n    return y\n")
    (tmp_path / "c.py").write_text("from wandb_rlcluster.core import a\n")
    assert cycles(import_graph(tmp_path)) == [["a", "b"]]


def test_a_gauge_reads_the_fix_its_rule_declares() -> None:
    """``Gauge.fix`` reads the declarations' own registry (``rule.declared_fix``), not the catalog: the two agree."""
    from wandb_rlcluster.core import catalog, rule

    assert len(catalog.by_key()) == len(catalog.CATALOG)
    for r in catalog.CATALOG:
        assert rule.declared_fix(r.gauge, r.id) == catalog.declared_fix(r.gauge, r.id) == r.fix
