"""The package's module graph has no circle: no module of adaptive_fp8 imports, at the top or
inside a function, a module that imports it back (directly or through others)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "python" / "adaptive_fp8"


def imports(path: Path, modules: set[str]) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.level:  # from .x import y, inside the package
                names = [node.module.split(".")[0]]
            elif node.module == "adaptive_fp8":
                names = [a.name for a in node.names]
            elif node.module.startswith("adaptive_fp8."):
                names = [node.module.split(".")[1]]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".")[1] for a in node.names if a.name.startswith("adaptive_fp8.")]
        out |= {n for n in names if n in modules}
    return out - {path.stem}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_finder_sees_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_one_that_imports_it_back():
    modules = {p.stem for p in PKG.glob("*.py")}
    graph = {m: imports(PKG / f"{m}.py", modules) for m in modules}
    assert graph["step_bench"], "the parser found no imports: the test would pass vacuously"
    assert cycles(graph) == []
