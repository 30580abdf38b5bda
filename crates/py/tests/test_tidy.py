"""The package stays short (files and functions, as the Rust size gate) and its module graph has
no circle: no module of adaptive_fp8 imports, at the top or
inside a function, a module that imports it back (directly or through others)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "python" / "adaptive_fp8"


def module_name(path: Path) -> str:
    """``megatron``, ``bench.step_bench``: the dotted name under the package (``__init__`` is
    its folder's name, the package's own is ``""``)."""
    parts = list(path.relative_to(PKG).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``path`` imports, at the top or inside a function."""
    here = module_name(path)
    folder = here if path.name == "__init__.py" else here.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:  # from .x import y, relative to the module's folder
                base = ".".join(p for p in [folder, mod] if p)
            elif mod == "adaptive_fp8" or mod.startswith("adaptive_fp8."):
                base = mod.removeprefix("adaptive_fp8").lstrip(".")
            else:
                continue
            names = [base] + [".".join(p for p in [base, a.name] if p) for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name.removeprefix("adaptive_fp8.") for a in node.names if a.name.startswith("adaptive_fp8.")]
        out |= {n for n in names if n in modules}
    return out - {here, ""}


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


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in PKG.rglob("*.py")}


def test_no_module_imports_one_that_imports_it_back():
    mods = all_modules()
    graph = {m: imports(p, set(mods)) for m, p in mods.items()}
    assert graph["bench.step_bench"], "the parser found no imports: the test would pass vacuously"
    assert "bench.step_spec" in graph["bench.step_bench"] and "amax_eps" in graph["bench.te_worker"]
    assert cycles(graph) == []


def test_the_trainer_side_never_imports_the_measurement_tools():
    """The hooks a trainer imports (the package's top) stand alone: ``adaptive_fp8.bench`` is the
    tools', and depends on the top, never the other way."""
    mods = all_modules()
    top = {m: p for m, p in mods.items() if not m.startswith("bench")}
    assert {"", "megatron", "te", "amax_eps"} <= set(top)
    for m, p in top.items():
        reached = {i for i in imports(p, set(mods)) if i.startswith("bench")}
        assert not reached, f"adaptive_fp8.{m or '__init__'} imports {sorted(reached)}"


MAX_FILE_LINES = 600
MAX_FN_LINES = 120


def _sizes(root: Path) -> tuple[list[str], list[str]]:
    """Files over MAX_FILE_LINES and functions over MAX_FN_LINES under ``root``."""
    long_files, long_fns = [], []
    for f in sorted(root.rglob("*.py")):
        text = f.read_text()
        if len(text.splitlines()) > MAX_FILE_LINES:
            long_files.append(str(f.relative_to(root)))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.end_lineno - node.lineno + 1 > MAX_FN_LINES:
                    long_fns.append(f"{f.relative_to(root)}:{node.name}")
    return long_files, long_fns


def test_the_size_gate_sees_a_long_file_and_a_long_function(tmp_path):
    (tmp_path / "long.py").write_text("x = 1\n" * (MAX_FILE_LINES + 1))
    body = "".join("    y = 1\n" for _ in range(MAX_FN_LINES))
    (tmp_path / "fn.py").write_text(f"def f():\n{body}")
    assert _sizes(tmp_path) == (["long.py"], ["fn.py:f"])


REPO = PKG.parents[3]


def test_the_package_stays_short():
    """The size gate of the Rust crates (xtask/tests/sizes.rs), for the Python package, its tests
    and the repository's scripts: files a reader holds in one sitting, functions on one screen."""
    long_files, long_fns = [], []
    for root in (PKG, REPO / "crates" / "py" / "tests", REPO / "scripts"):
        files, fns = _sizes(root)
        long_files += [str((root / f).relative_to(REPO)) for f in files]
        long_fns += [str((root / f).relative_to(REPO)) for f in fns]
    assert not long_files, f"files over {MAX_FILE_LINES} lines: {long_files}; split each by concern"
    assert not long_fns, f"functions over {MAX_FN_LINES} lines: {long_fns}; split each into named steps"
