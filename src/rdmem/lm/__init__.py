"""A language model in the loop: model-measured distortion and KV-cache eviction (``pip install 'rdmem[lm]'``).

- :class:`LanguageModel` scores targets (a gold answer, the next turn) after a context: the
  distortion of a compaction, in the model's own terms.
- :mod:`rdmem.lm.presses`: KV-cache eviction (StreamingLLM, H2O, SnapKV from NVIDIA's kvpress,
  and :class:`RdmemPress`, rdmem's message values carried into the cache);
  :func:`press_nll` scores a target through each press at several shares from one prefill, and
  :func:`press_positions` says which positions a press keeps.

Nothing here is imported by the rest of rdmem unless asked for (torch is heavy).
"""

import importlib
from typing import Any

_EXPORTS = {
    "LanguageModel": "model", "Target": "model", "Encoded": "model", "question_target": "model",
    "turn_target": "model", "message_line": "model", "packaged_model_file": "model", "DEFAULT_LM": "model",
    "RdmemPress": "presses", "PRESSES": "presses", "get_press": "presses", "message_values": "presses",
    "check_available": "model", "StreamingPress": "presses", "token_values": "presses",
    "press_nll": "kv", "press_positions": "kv", "PressScores": "kv",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
