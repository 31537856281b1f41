"""rdmem: working memory for LLM agents that never overflows and forgets wisely.

>>> from rdmem import compact
>>> out = compact([{"role": "user", "content": "hi"}], budget=100, policy="window")
>>> out.messages
[{'role': 'user', 'content': 'hi'}]
"""

from .compaction import compact
from .contract import Plan, Policy, Problem, scores_of
from .embed import CachedEmbedder, Embedder, SentenceTransformerEmbedder
from .manager import MemoryManager
from .policies import POLICIES, get_policy, register_policy
from .history import is_valid_history, validate_history
from .summarize import ExtractiveSummarizer, LLMSummarizer, Summarizer, SummarizerError
from .tokens import Tokenizer, get_tokenizer
from .result import Compaction, UnitDecision
from .units import MemoryUnit, Rung

__all__ = [
    "compact",
    "Compaction",
    "UnitDecision",
    "MemoryManager",
    "MemoryUnit",
    "Rung",
    "POLICIES",
    "Policy",
    "Problem",
    "Plan",
    "scores_of",
    "get_policy",
    "register_policy",
    "Tokenizer",
    "get_tokenizer",
    "Embedder",
    "CachedEmbedder",
    "SentenceTransformerEmbedder",
    "Summarizer",
    "ExtractiveSummarizer",
    "LLMSummarizer",
    "SummarizerError",
    "is_valid_history",
    "validate_history",
]

__version__ = "0.1.0"
