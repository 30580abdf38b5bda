"""`_core.pyi` against the binding itself (an equivalent of mypy's stubtest, with no extra
package): every name the native module exports is stubbed and every stub exists; each function's
and method's parameters (names, kinds, defaults) are the binding's; each class's attributes and
properties are stubbed."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import adaptive_fp8._core as core

STUB = Path(core.__file__).with_name("_core.pyi")
if not STUB.exists():  # an editable layout: the stub beside the sources
    STUB = Path(__file__).resolve().parents[1] / "python" / "adaptive_fp8" / "_core.pyi"

KINDS = {"posonly": inspect.Parameter.POSITIONAL_ONLY, "arg": inspect.Parameter.POSITIONAL_OR_KEYWORD,
         "kwonly": inspect.Parameter.KEYWORD_ONLY}


def stub_tree() -> ast.Module:
    return ast.parse(STUB.read_text())


def stub_params(fn: ast.FunctionDef) -> list[tuple[str, object, object]]:
    """(name, kind, default) per parameter of a stubbed function, `self` dropped."""
    a = fn.args
    out = []
    pos = a.posonlyargs + a.args
    defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    for i, (p, d) in enumerate(zip(pos, defaults)):
        kind = KINDS["posonly"] if i < len(a.posonlyargs) else KINDS["arg"]
        out.append((p.arg, kind, ast.literal_eval(d) if d is not None else inspect.Parameter.empty))
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append((p.arg, KINDS["kwonly"], ast.literal_eval(d) if d is not None else inspect.Parameter.empty))
    return [x for x in out if x[0] != "self"]


def runtime_params(obj) -> list[tuple[str, object, object]]:
    sig = inspect.signature(obj)
    # PyO3 marks `self` positional-only; the stubs write methods plainly.
    return [(p.name, KINDS["arg"] if p.kind == KINDS["posonly"] else p.kind, p.default)
            for p in sig.parameters.values() if p.name != "self"]


def public(names) -> set[str]:
    return {n for n in names if not n.startswith("_") or n == "__version__"}


def test_every_export_is_stubbed_and_every_stub_exists():
    tree = stub_tree()
    stubbed = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            stubbed.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            stubbed.add(node.target.id)
    assert public(dir(core)) == stubbed


def test_function_signatures_match():
    for node in stub_tree().body:
        if isinstance(node, ast.FunctionDef):
            assert stub_params(node) == runtime_params(getattr(core, node.name)), node.name


def test_classes_match():
    for node in stub_tree().body:
        if not isinstance(node, ast.ClassDef):
            continue
        cls = getattr(core, node.name)
        members = set()
        for item in node.body:
            if isinstance(item, ast.FunctionDef):
                members.add(item.name)
                if item.name.startswith("__") or any(isinstance(d, ast.Name) and d.id == "property" for d in item.decorator_list):
                    continue
                assert stub_params(item) == runtime_params(getattr(cls, item.name)), f"{node.name}.{item.name}"
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                members.add(item.target.id)
        if issubclass(cls, Exception):
            continue
        runtime = {n for n in vars(cls) if not n.startswith("_")}
        assert runtime - members == set(), f"{node.name}: not stubbed"
        assert {m for m in members if not m.startswith("_")} - runtime == set(), f"{node.name}: stubbed, not in the binding"
