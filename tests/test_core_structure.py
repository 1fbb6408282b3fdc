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


MAX_CLASS_LINES = 300
MAX_FUNCTION_LINES = 60


def oversized(core: Path = CORE) -> list[str]:
    """Every class over ``MAX_CLASS_LINES`` and every function or method over ``MAX_FUNCTION_LINES`` lines in
    ``core`` (a nested function counts on its own and inside the one that holds it), by its first and last line."""
    out: list[str] = []
    for path in sorted(core.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            size = (node.end_lineno or node.lineno) - node.lineno + 1 if isinstance(node, ast.stmt) else 0
            if isinstance(node, ast.ClassDef) and size > MAX_CLASS_LINES:
                out.append(f"{path.name}:{node.lineno} class {node.name}: {size} lines")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and size > MAX_FUNCTION_LINES:
                out.append(f"{path.name}:{node.lineno} {node.name}: {size} lines")
    return out


def test_no_core_class_or_method_is_too_long_to_read_on_one_screen() -> None:
    found = oversized()
    assert not found, f"over {MAX_CLASS_LINES} lines a class or {MAX_FUNCTION_LINES} a function: {found}"


def test_the_size_reader_sees_a_long_method(tmp_path: Path) -> None:
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "m.py").write_text(f"class C:\n    def f(self):\n{body}\n")
    assert oversized(tmp_path) == [f"m.py:2 f: {MAX_FUNCTION_LINES + 1} lines"]
