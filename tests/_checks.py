"""The independent checks of compaction output, and the hashing embedder: they ship in ``rdmem.testing``
(so a user's own policy can be checked the same way); the tests import them from here."""

from rdmem.testing._history import (  # noqa: F401
    ALLOWED_KEYS, TRUNCATED, HashingEmbedder, check_compaction, clean, history_problems, ids_of, marker_count,
    tool_groups,
)
