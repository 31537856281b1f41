"""README's Python blocks: every name they import resolves, and each block runs as written."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from .conftest import LM_CACHE

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_has_python_blocks():
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("n", range(len(BLOCKS)))
def test_every_import_resolves(n):
    import importlib

    for node in ast.walk(ast.parse(BLOCKS[n])):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rdmem"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"README block {n}: {node.module} has no {alias.name}"


@pytest.mark.slow
@pytest.mark.parametrize("n", range(len(BLOCKS)))
def test_block_runs_as_written(n, tmp_path, monkeypatch):
    from rdmem import POLICIES

    monkeypatch.chdir(tmp_path)  # blocks create store files (sqlite:///memory.db)
    monkeypatch.setenv("RDMEM_CACHE_DIR", str(LM_CACHE))  # the language model, converted once per checkout
    registered = dict(POLICIES)
    try:
        exec(compile(BLOCKS[n], f"README block {n}", "exec"), {"__name__": f"readme_{n}"})
    finally:  # a block may register a policy: other tests see the registry as shipped
        POLICIES.clear()
        POLICIES.update(registered)
