"""rdmem: working memory for LLM agents that never overflows and forgets wisely.

Everything a user or a policy writer needs is importable from here; the
modules behind these names are implementation (see ARCHITECTURE.md).

>>> from rdmem import compact
>>> out = compact([{"role": "user", "content": "hi"}], budget=100, policy="window")
>>> out.messages
[{'role': 'user', 'content': 'hi'}]
"""

from ._api import compact
from ._embedding import EmbeddingWorker
from .contract import Composed, LearnsOnline, Plan, Policy, Problem, scores_of
from .embed import CachedEmbedder, Embedder, MiniLMEmbedder, SentenceTransformerEmbedder, get_embedder
from .errors import InvalidInput, InvalidType, MissingDependency, RdmemError
from .history import is_valid_history, validate_history
from .learn.online import Feedback
from .aio import AsyncMemoryManager
from .manager import MemoryManager
from .policies import (
    POLICIES, TASK_MODES, LadderPolicy, RDPolicy, ScoredPolicy, SummaryBuffer, TaskMode, get_policy, register_policy,
)
from .result import Compaction, UnitDecision
from .scoring import LearnedValue, Scorer, ScoringContext
from .store import DuplicateIdError, Store, StoreError, UnknownIdError, VersionConflict, open_store
from .summarize import ExtractiveSummarizer, LLMSummarizer, Summarizer, SummarizerError
from .tokens import Tokenizer, check_budget, get_tokenizer
from .units import MemoryUnit, Rung

__all__ = [
    # fitting a history to a budget
    "compact", "Compaction", "UnitDecision", "check_budget",
    # memory that lives in a store
    "MemoryManager", "AsyncMemoryManager", "EmbeddingWorker", "open_store", "Store", "StoreError", "DuplicateIdError", "UnknownIdError", "VersionConflict",
    # policies
    "POLICIES", "get_policy", "register_policy", "RDPolicy", "LadderPolicy", "ScoredPolicy", "SummaryBuffer",
    "TaskMode", "TASK_MODES", "LearnedValue", "Feedback",
    # writing a policy
    "Policy", "Problem", "Plan", "Composed", "LearnsOnline", "scores_of", "Scorer", "ScoringContext", "MemoryUnit",
    "Rung",
    # the pieces a policy is built from
    "Tokenizer", "get_tokenizer", "Embedder", "MiniLMEmbedder", "CachedEmbedder", "SentenceTransformerEmbedder",
    "get_embedder", "Summarizer", "ExtractiveSummarizer", "LLMSummarizer", "SummarizerError",
    # errors (rdmem.errors): whose fault an error is
    "RdmemError", "InvalidInput", "InvalidType", "MissingDependency",
    # chat histories
    "is_valid_history", "validate_history",
]

__version__ = "0.2.0"
