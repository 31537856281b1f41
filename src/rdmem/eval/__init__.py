"""Evaluation harness: rate-distortion curves of every policy on LoCoMo or on your own logs.

>>> from rdmem.eval import EvalConfig, load_locomo, run_eval     # doctest: +SKIP
>>> convs = load_locomo("locomo10.json")                         # doctest: +SKIP
>>> result = run_eval(convs, EvalConfig(budgets=(1000, 4000)))  # doctest: +SKIP
>>> write_outputs(result, "eval-out")                            # doctest: +SKIP

The command line does the same: ``rdmem eval locomo PATH`` / ``rdmem eval jsonl PATH``.
"""

import importlib
from typing import Any

_EXPORTS = {
    "Conversation": "..datasets", "Probe": "..datasets", "DatasetError": "..datasets", "load_locomo": "..datasets",
    "load_jsonl": "..datasets", "parse_jsonl": "..datasets", "LLMConfig": "llm", "LLMError": "llm",
    "to_csv": "report", "to_markdown": "report", "write_outputs": "report", "EvalConfig": "config",
    "EvalResult": "config", "Row": "config", "cached_embedder": "config", "default_cache_dir": "config",
    "run_eval": "runner",
}


def __getattr__(name: str) -> Any:
    # Loaded on first use: the command line reads the defaults without importing the harness.
    if name in _EXPORTS:
        where = _EXPORTS[name]
        return getattr(importlib.import_module(where if where.startswith("..") else f".{where}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Conversation",
    "Probe",
    "DatasetError",
    "load_locomo",
    "load_jsonl",
    "parse_jsonl",
    "EvalConfig",
    "EvalResult",
    "Row",
    "run_eval",
    "cached_embedder",
    "default_cache_dir",
    "LLMConfig",
    "LLMError",
    "to_csv",
    "to_markdown",
    "write_outputs",
]
