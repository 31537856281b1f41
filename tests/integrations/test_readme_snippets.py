"""README's "Use it from your framework": each snippet names a runnable example that exists, and every name it
imports (from rdmem and from the framework) resolves. The examples themselves run in each adapter's tests."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SECTION = (ROOT / "README.md").read_text(encoding="utf-8").split("## Use it from your framework", 1)[1].split("\n## ", 1)[0]
# Each snippet is the code block that follows a paragraph naming its example: (example, code).
SNIPPETS = re.findall(r"\(`(examples/\w+\.py)`\).*?```\n(.*?)```", SECTION, flags=re.S)


def test_every_framework_has_a_snippet():
    names = [Path(e).stem.split("_")[0] for e, _ in SNIPPETS]
    assert sorted(names) == ["langchain", "langgraph", "llamaindex", "mcp", "openai"]


@pytest.mark.parametrize("example,code", SNIPPETS, ids=[e for e, _ in SNIPPETS])
def test_snippet_is_short_names_its_example_and_its_imports_resolve(example, code):
    assert (ROOT / example).is_file(), f"{example} is not in the repository"
    assert len(code.strip().splitlines()) <= 10
    tree = ast.parse(code.replace("await ", "").replace("async with", "with"))
    imported = [(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names]
    assert imported, "a snippet shows where its names come from"
    for module, name in imported:
        assert hasattr(importlib.import_module(module), name), f"{module} has no {name}"
    # The snippet uses what the example uses: each rdmem name it imports is imported by the example too.
    source = (ROOT / example).read_text(encoding="utf-8")
    for module, name in imported:
        if module.startswith("rdmem"):
            assert name in source, f"{example} does not use {name}"
