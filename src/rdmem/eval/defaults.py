"""The evaluation's defaults (kept apart so the command line can show them without importing the harness)."""

__all__ = ["REGIMES", "DEFAULT_REGIMES", "DEFAULT_LATEST_POINTS", "DEFAULT_BUDGETS", "DEFAULT_POLICIES", "ORACLE", "FULL"]

#: streaming: the working set after the last message; query: context(query=question) per question; latest:
#: context(query=the latest user turn) at points through the conversation, scored on every question.
REGIMES = ("streaming", "query", "latest")
DEFAULT_REGIMES = ("streaming", "query")
#: How many points through each conversation the latest-turn regime builds a context at.
DEFAULT_LATEST_POINTS = 10
DEFAULT_BUDGETS = (500, 1000, 2000, 4000, 8000)
DEFAULT_POLICIES = ("window", "seed", "importance", "summary_buffer", "rd")
#: Pseudo-policies that every run reports next to the real ones.
ORACLE, FULL = "oracle", "full"
