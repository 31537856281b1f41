"""The evaluation's defaults (kept apart so the command line can show them without importing the harness)."""

__all__ = ["REGIMES", "DEFAULT_BUDGETS", "DEFAULT_POLICIES", "ORACLE", "FULL"]

REGIMES = ("streaming", "query")
DEFAULT_BUDGETS = (500, 1000, 2000, 4000, 8000)
DEFAULT_POLICIES = ("window", "seed", "importance", "summary_buffer", "rd")
#: Pseudo-policies that every run reports next to the real ones.
ORACLE, FULL = "oracle", "full"
