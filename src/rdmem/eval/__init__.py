"""Evaluation harness: rate-distortion curves of every policy on LoCoMo or on your own logs.

>>> from rdmem.eval import EvalConfig, load_locomo, run_eval     # doctest: +SKIP
>>> convs = load_locomo("locomo10.json")                         # doctest: +SKIP
>>> result = run_eval(convs, EvalConfig(budgets=(1000, 4000)))  # doctest: +SKIP
>>> write_outputs(result, "eval-out")                            # doctest: +SKIP

The command line does the same: ``rdmem eval locomo PATH`` / ``rdmem eval jsonl PATH``.
"""

from .datasets import Conversation, DatasetError, Probe, load_jsonl, load_locomo, parse_jsonl
from .llm import LLMConfig, LLMError
from .report import to_csv, to_markdown, write_outputs
from .runner import EvalConfig, EvalResult, Row, cached_embedder, default_cache_dir, run_eval

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
