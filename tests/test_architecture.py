"""The layout explains itself: no import cycle, no import against the layers of ARCHITECTURE.md, small pieces."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "rdmem"
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 100


def _modname(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exists(name: str) -> bool:
    base = SRC.parent / name.replace(".", "/")
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def _resolve(mod: str, is_pkg: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _imports(path: Path) -> set[str]:
    """The rdmem modules ``path`` imports: ``import``, ``from ... import`` (at any depth) and
    ``importlib.import_module("...")`` with a literal name; not inside ``if TYPE_CHECKING:``."""
    mod, is_pkg = _modname(path), path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)}
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("rdmem")}
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(mod, is_pkg, node.level, node.module)
            if base.startswith("rdmem"):
                out |= {f"{base}.{a.name}" if _exists(f"{base}.{a.name}") else base for a in node.names}
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module":
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                name = arg.value
                if name.startswith("."):
                    level = len(name) - len(name.lstrip("."))
                    name = _resolve(mod, is_pkg, level, name.lstrip(".") or None)
                if name.startswith("rdmem"):
                    out.add(name)
    return out - {mod}


GRAPH = {_modname(p): _imports(p) for p in SRC.rglob("*.py")}


def _layers() -> dict[str, int]:
    """Top-level module or package of rdmem -> its layer, read from ARCHITECTURE.md's table."""
    out = {}
    for line in (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\| (\d+) \| (.+?) \|", line)
        if m:
            for name in re.findall(r"`([\w.]+)`", m.group(2)):
                out[name] = int(m.group(1))
    return out


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_no_import_cycle():
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in GRAPH.get(v, ()):
            if w not in GRAPH:
                continue
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
                cycles.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert cycles == []


def test_every_module_has_a_layer():
    layers = _layers()
    missing = sorted({_top(m) for m in GRAPH if _top(m)} - set(layers))
    assert missing == [], f"add these to ARCHITECTURE.md's table of layers: {missing}"


def test_no_import_against_the_layers():
    layers = _layers()
    wrong = []
    for mod, deps in GRAPH.items():
        here = _top(mod)
        if not here:  # rdmem/__init__.py: the public names, from anywhere
            continue
        for dep in deps:
            there = _top(dep)
            if there and there != here and layers.get(there, 99) > layers.get(here, -1):
                wrong.append(f"{mod} (layer {layers[here]}) imports {dep} (layer {layers.get(there)})")
    assert wrong == []


@pytest.mark.parametrize("path", sorted(SRC.rglob("*.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_pieces_are_small(path):
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_MODULE_LINES, f"{path.name}: over {MAX_MODULE_LINES} lines"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            assert n <= MAX_FUNCTION_LINES, f"{path.name}: {node.name} is {n} lines"


def test_the_checker_sees_imports_at_every_depth():
    """It would miss nothing: a function-level import and import_module both count."""
    assert "rdmem.policies" in GRAPH["rdmem._api"]
    assert "rdmem.embed" in GRAPH["rdmem.scoring._base"]
    assert any(d.startswith("rdmem.eval") for d in GRAPH["rdmem.cli.eval"])
