"""MemoryManager: a session's memory, streamed in message by message."""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .compaction import Compaction, compact_units
from .embed import Embedder, get_embedder
from .features import Features, content_words
from .policies import Policy, get_policy
from .scoring import embed_text
from .store import Store, StoredUnit, open_store
from .summarize import Summarizer
from .tokens import Tokenizer, get_tokenizer
from .units import MemoryUnit, make_unit, normalize_messages

__all__ = ["MemoryManager"]

#: The low watermark of policies that do not set their own ``low_watermark``.
_DEFAULT_LOW = 0.8
#: Key of the session-log records that save the feedback shift of the value model.
_FEEDBACK = "value_feedback"
#: Key of a stored unit's features that names the tokenizer its ``tokens`` were counted with
#: (:attr:`rdmem.tokens.Tokenizer.fingerprint`).
_COUNTED_BY = "counted_by"


class MemoryManager:
    """Working memory under a token budget, with everything else archived, never lost.

    Messages stream in with :meth:`add`. When the working set passes
    ``high × budget`` tokens it is compacted down to ``low × budget``; what
    leaves goes to the archive tier. Between compactions the working set only
    grows at its end, so the prompt prefix stays stable for inference-engine
    prefix caches. :meth:`context` builds what the model sees, from the working
    set and, for a query, the best archived units too.

    Parameters
    ----------
    budget:
        Tokens the model may be sent (per-message overhead included).
    policy:
        A name from :data:`rdmem.POLICIES` or a policy object.
    store:
        ``None``/``"memory://"`` (in-process), ``"sqlite:///path.db"``,
        ``"postgresql://..."``, or a store object.
    session:
        The session id inside the store.
    high, low:
        Watermarks as fractions of ``budget`` (``0 < low <= high``). ``low=None``
        (default) takes the policy's ``low_watermark`` if it has one (``rd``:
        0.95), else 0.8. A lower mark compacts less often, so the prompt
        prefix stays stable for longer; a higher one leaves fewer messages that
        arrived since the last compaction, which no policy has judged yet, in
        the working set (on LoCoMo, ``rd`` streaming at 2,000 tokens: evidence
        recall 0.137 with 0.8, 0.166 with 0.95).
    archive_candidates:
        How many archived units a query may bring back into competition.

    >>> mem = MemoryManager(budget=60, policy="window")
    >>> for i in range(10):
    ...     _ = mem.add(role="user", content=f"note number {i}")
    >>> [m["content"] for m in mem.messages()]
    ['[4 messages omitted]', 'note number 4', 'note number 5', 'note number 6', 'note number 7', 'note number 8', 'note number 9']
    >>> mem.archived_ids()
    ['m0', 'm1', 'm2', 'm3']
    """

    def __init__(
        self,
        budget: int,
        policy: str | Policy = "rd",
        *,
        store: str | Store | None = None,
        session: str = "default",
        tokenizer: str | Tokenizer | Callable[[str], int] = "cl100k_base",
        message_overhead: int | None = None,
        embedder: Embedder | str | None = None,
        summarizer: Summarizer | None = None,
        high: float = 1.0,
        low: float | None = None,
        markers: bool = True,
        archive_candidates: int = 200,
    ) -> None:
        if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)):
            raise TypeError(f"budget must be an int number of tokens, got {type(budget).__name__}")
        if budget <= 0:
            raise ValueError(f"budget must be > 0 tokens, got {budget}")
        self.policy = get_policy(policy)
        if low is None:
            low = min(float(getattr(self.policy, "low_watermark", _DEFAULT_LOW)), high)
        if not (0 < low <= high):
            raise ValueError(f"watermarks must satisfy 0 < low <= high, got low={low!r}, high={high!r}")
        if not isinstance(session, str) or not session:
            raise ValueError(f"session must be a non-empty string, got {session!r}")
        if isinstance(archive_candidates, bool) or not isinstance(archive_candidates, int) or archive_candidates < 0:
            raise ValueError(f"archive_candidates must be an int >= 0, got {archive_candidates!r}")
        self.budget = int(budget)
        self.session = session
        self.high = float(high)
        self.low = float(low)
        self.markers = markers
        self.archive_candidates = archive_candidates
        self.summarizer = summarizer
        self._tokenizer_spec = tokenizer
        self._overhead = message_overhead
        self._embedder_spec = embedder
        self._store_spec = store
        self._state: _State | None = None
        self._feedback_delta: np.ndarray | None = None
        self._tuned_policy: Policy | None = None

    # -- lazy state -------------------------------------------------------
    @property
    def tokenizer(self) -> Tokenizer:
        return self._load().tokenizer

    def _load(self) -> _State:
        if self._state is None:
            tok = get_tokenizer(self._tokenizer_spec, message_overhead=self._overhead)
            store = open_store(self._store_spec)
            st = _State(tok, store)
            # Positions, not stored seqs, index the units: two processes writing one session may share seqs.
            # A stored count made with this very tokenizer is reused (re-tokenising is a quarter of the time
            # it takes to open a large session); any other is counted again.
            fingerprint = tok.fingerprint
            for position, su in enumerate(store.load(self.session)):
                feats = Features.from_dict(su.features) if su.features else None
                same = fingerprint is not None and (su.features or {}).get(_COUNTED_BY) == fingerprint
                unit = make_unit(su.id, su.message, position, tok, features=feats, tokens=su.tokens if same else None)
                if su.embedding is not None:
                    # Archived vectors may share the store's search matrix (SQLite: one column-major array);
                    # the working set's few take part in every selection, so they get compact copies of
                    # their own instead of being gathered out of that matrix on every call.
                    unit.embedding = (np.array if su.tier == "working" else np.asarray)(su.embedding, dtype=np.float32)
                st.append(unit, su.tier)
            self._state = st
            if st.units:
                self._restore_feedback(store)
        return self._state

    @property
    def _embedder(self) -> Embedder | None:
        if self.policy.needs_embeddings or self._embedder_spec is not None:
            return get_embedder(self._embedder_spec)
        return None

    # -- writing -----------------------------------------------------------
    def add(self, message: Mapping[str, Any] | None = None, /, **fields: Any) -> str:
        """Append one message (a dict, or ``role=``, ``content=``, ``id=``... keywords); return its id.

        The message is stored before this returns; the working set is
        compacted if it passed the high watermark.
        """
        if message is not None and fields:
            raise TypeError("pass either a message dict or keyword fields, not both")
        msg = dict(message) if message is not None else fields
        if not isinstance(msg, dict):
            raise TypeError(f"message must be a dict, got {type(message).__name__}")
        st = self._load()
        index = len(st.units)
        if "id" not in msg or msg["id"] is None:
            msg["id"] = f"m{index}"
        ((mid, clean),) = normalize_messages([msg])
        if mid in st.by_id:
            raise ValueError(f"session {self.session!r} already has a message with id {mid!r}")
        unit = make_unit(mid, clean, index, st.tokenizer)
        emb = self._embedder
        if emb is not None:
            unit.embedding = emb.embed([embed_text(unit)])[0]
        self._store.append(self.session, [_to_stored(unit, "working", st.tokenizer)])
        st.append(unit, "working")
        if st.working_tokens() > self.high * self.budget:
            self._compact_working()
        return mid

    def extend(self, messages: Sequence[Mapping[str, Any]]) -> list[str]:
        """Add several messages in order (one :meth:`add` each); return their ids."""
        return [self.add(m) for m in messages]

    def _compact_working(self) -> None:
        st = self._load()
        working = st.working_units()
        target = max(int(self.low * self.budget), 1)
        result = self._compact(working, target, self._working_policy)
        # A message cut to fit stays in working memory (context() cuts it again): archiving it would
        # drop the newest message silently when it alone exceeds the budget.
        kept = {d.id for d in result.report if d.decision in ("kept", "truncated", "compressed")}
        # A tool call still waiting for results stays too: archiving it would orphan the results to come.
        kept |= _pending_call(working)
        leaving = [u.id for u in working if u.id not in kept]
        if leaving:
            self._store.set_tier(self.session, leaving, "archive")
            for i in leaving:
                st.set_tier(i, "archive")
            self._store.log_compaction(
                self.session,
                {"archived": leaving, "kept": len(kept), "budget": target, "policy": self.policy.name},
            )

    # -- reading -----------------------------------------------------------
    def working_ids(self) -> list[str]:
        """Ids of the units in working memory, in order."""
        return [u.id for u in self._load().working_units()]

    def archived_ids(self) -> list[str]:
        st = self._load()
        return [u.id for u in st.units if st.tier[u.id] == "archive"]

    def context(self, query: str | None = None, *, budget: int | None = None) -> Compaction:
        """What the model should see now, within ``budget`` (default: the manager's).

        Without a query: the working set, compacted if it does not fit. With a
        query: the working set plus the archived units that best match the
        query (lexical + dense), all competing in one budgeted selection.
        """
        st = self._load()
        budget = self.budget if budget is None else budget
        if isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0:
            raise ValueError(f"budget must be an int > 0 tokens, got {budget!r}")
        if query is not None and not isinstance(query, str):
            raise TypeError(f"query must be a string or None, got {type(query).__name__}")
        cands = st.working_units()
        if query and self.archive_candidates and st.archived:
            emb = self._embedder
            qvec = emb.embed([query])[0] if emb is not None else None
            hits = self._store.search(self.session, query, qvec, k=self.archive_candidates, tier="archive")
            extra = {st.by_id[i].index for i, _ in hits if i in st.by_id}
            cands = sorted(cands + [st.units[j] for j in extra], key=lambda u: u.index)
            cands = _whole_groups(cands, st.members)
        return self._compact(cands, budget, self._active_policy, query)

    def _compact(self, units: list[MemoryUnit], budget: int, policy: Policy, query: str | None = None) -> Compaction:
        """:func:`compact_units` with this session's tokenizer, embedder, summarizer and document frequencies."""
        st = self._load()
        return compact_units(
            units,
            budget=budget,
            policy=policy,
            query=query,
            tokenizer=st.tokenizer,
            embedder=self._embedder,
            summarizer=self.summarizer,
            markers=self.markers,
            now=len(st.units),
            doc_freq=(st.df, len(st.units)),
        )

    def feedback(self, ids: Sequence[str], reward: float, *, learning_rate: float = 0.5, max_shift: float = 2.0) -> None:
        """Tell the value model whether the units ``ids`` turned out to be needed (online learning).

        ``reward`` in [0, 1]: 1 means "these were needed" (an answer used them),
        0 means "not needed". Each id takes one stochastic-gradient step on the
        logistic loss of the prior value model, in standardised feature space::

            delta += learning_rate * (reward - p(unit)) * z(unit) / len(ids)

        and every coordinate of ``delta`` is clipped to ``[-max_shift, max_shift]``
        (bounded: feedback can tilt the shipped model, never replace it). The
        shift applies to this session only, is saved in the store's log of the
        session (a reopened session keeps it), and :meth:`reset_feedback`
        reverts it exactly. Needs a policy with a learned value model (``rd``).
        """
        if not 0.0 <= float(reward) <= 1.0:
            raise ValueError(f"reward must be in [0, 1], got {reward!r}")
        if not learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {learning_rate!r}")
        base = self._base_value_model()
        st = self._load()
        unknown = [i for i in ids if i not in st.by_id]
        if unknown:
            raise ValueError(f"unknown ids in feedback: {unknown[:5]}")
        if not ids:
            return
        from .learn.features import model_prior_matrix
        from .scoring import ScoringContext

        units = [st.by_id[i] for i in ids]
        ctx = ScoringContext(units, embedder=self._embedder, doc_freq=(st.df, len(st.units)))
        x = model_prior_matrix(base, ctx, novelty=False)
        model = self._value_model()
        z = (x - base.mean_) / base.scale_
        p = model.predict(x)
        step = learning_rate * ((float(reward) - p)[:, None] * z).mean(axis=0)
        self._set_feedback(np.clip(self._feedback_delta + step, -max_shift, max_shift))

    def reset_feedback(self) -> None:
        """Undo all :meth:`feedback` for this session (back to the shipped or given model), in the store too."""
        self._base_value_model()
        self._set_feedback(np.zeros_like(self._feedback_delta))

    def _set_feedback(self, delta: np.ndarray) -> None:
        self._store.log_compaction(self.session, {_FEEDBACK: [float(x) for x in delta]})
        self._feedback_delta = delta
        self._tuned_policy = None

    def _restore_feedback(self, store: Store) -> None:
        """The session's last saved feedback shift, if its policy learns and it was saved for this model."""
        prior = self._learned_prior()
        if prior is None:
            return
        saved = [r[_FEEDBACK] for r in store.compaction_log(self.session) if _FEEDBACK in r]
        if not saved:
            return
        if len(saved[-1]) != len(prior.weights_):
            warnings.warn(
                f"rdmem: session {self.session!r} has feedback saved for another value model "
                f"({len(saved[-1])} weights, this one has {len(prior.weights_)}); ignored",
                RuntimeWarning,
                stacklevel=4,
            )
            return
        self._feedback_delta = np.asarray(saved[-1], dtype=np.float64)
        self._tuned_policy = None

    def _learned_prior(self):  # type: ignore[no-untyped-def]
        """The prior value model of the policy, or ``None`` when the policy has no learned value model."""
        value = getattr(self.policy, "value", None)
        return value._models()[0] if value is not None and hasattr(value, "_models") else None

    def _base_value_model(self):  # type: ignore[no-untyped-def]
        prior = self._learned_prior()
        if prior is None:
            raise ValueError(f"feedback needs a policy with a learned value model (rd); {self.policy.name!r} has none")
        if self._feedback_delta is None or len(self._feedback_delta) != len(prior.weights_):
            self._feedback_delta = np.zeros(len(prior.weights_))
        return prior

    def _value_model(self):  # type: ignore[no-untyped-def]
        import copy

        base = self._base_value_model()
        tuned = copy.copy(base)
        tuned.weights_ = base.weights_ + self._feedback_delta
        return tuned

    @property
    def _active_policy(self) -> Policy:
        """The policy, with this session's feedback applied to its value model."""
        if self._feedback_delta is None or not np.any(self._feedback_delta):
            return self.policy
        if self._tuned_policy is None:
            import dataclasses

            value = dataclasses.replace(self.policy.value, prior=self._value_model())  # type: ignore[attr-defined]
            self._tuned_policy = dataclasses.replace(self.policy, value=value)  # type: ignore[type-var]
        return self._tuned_policy

    @property
    def _working_policy(self) -> Policy:
        """The policy that trims the working set: it holds whole messages, so no representation ladder
        (the ladder chooses how to send them when a context is built)."""
        policy = self._active_policy
        if getattr(policy, "ladder", False):
            import dataclasses

            return dataclasses.replace(policy, ladder=False)  # type: ignore[type-var]
        return policy

    def messages(self, query: str | None = None) -> list[dict[str, Any]]:
        """The messages for the next model call (``context(query).messages``)."""
        return self.context(query).messages

    @property
    def _store(self) -> Store:
        return self._load().store

    def close(self) -> None:
        if self._state is not None:
            self._state.store.close()
            self._state = None

    def __enter__(self) -> MemoryManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self._load().units)


class _State:
    """Run-time state of a manager (kept apart from its parameters)."""

    def __init__(self, tokenizer: Tokenizer, store: Store) -> None:
        self.tokenizer = tokenizer
        self.store = store
        self.units: list[MemoryUnit] = []
        self.by_id: dict[str, MemoryUnit] = {}
        self.tier: dict[str, str] = {}
        self.df: Counter[str] = Counter()
        self.members: dict[int, list[MemoryUnit]] = {}  # group -> its units
        self.archived = 0
        self._call_owner: dict[str, int] = {}
        self._working: dict[str, MemoryUnit] = {}
        self._working_tokens = 0

    def append(self, unit: MemoryUnit, tier: str) -> None:
        # Incremental :func:`group_units`: earlier groups never change when a unit is appended.
        owner = self._call_owner.get(str(unit.message.get("tool_call_id"))) if unit.role == "tool" else None
        if owner is None:
            owner = len(self.members)
            for call in unit.message.get("tool_calls") or ():
                self._call_owner[call["id"]] = owner
        unit.group = owner
        self.members.setdefault(owner, []).append(unit)
        self.units.append(unit)
        self.by_id[unit.id] = unit
        self.tier[unit.id] = "archive"
        self.archived += 1
        self.set_tier(unit.id, tier)
        self.df.update(set(content_words(unit.text)))

    def set_tier(self, uid: str, tier: str) -> None:
        unit = self.by_id[uid]
        if tier == "working" and uid not in self._working:
            self._working[uid] = unit
            self._working_tokens += unit.tokens
        elif tier != "working" and uid in self._working:
            del self._working[uid]
            self._working_tokens -= unit.tokens
        self.archived += (tier != "working") - (self.tier[uid] != "working")
        self.tier[uid] = tier

    def working_units(self) -> list[MemoryUnit]:
        return sorted(self._working.values(), key=lambda u: u.index)

    def working_tokens(self) -> int:
        return self._working_tokens


def _whole_groups(cands: list[MemoryUnit], members: Mapping[int, list[MemoryUnit]]) -> list[MemoryUnit]:
    """Add the rest of any tool-call group a candidate belongs to."""
    have = {u.id for u in cands}
    extra = [m for g in {u.group for u in cands} for m in members.get(g, ()) if m.id not in have]
    return sorted(cands + extra, key=lambda u: u.index) if extra else cands


def _pending_call(working: Sequence[MemoryUnit]) -> set[str]:
    """Ids of the newest assistant tool call and its results so far, when some results have not arrived."""
    for pos in range(len(working) - 1, -1, -1):
        unit = working[pos]
        if unit.role == "tool":
            continue
        calls = {c["id"] for c in unit.message.get("tool_calls") or ()}
        answered = {w.message.get("tool_call_id") for w in working[pos + 1:]}
        return {w.id for w in working[pos:]} if calls - answered else set()
    return set()


def stored_features(features: Features, tokenizer: Tokenizer) -> dict[str, Any]:
    """A unit's features as a store keeps them, naming the tokenizer its token count was made with
    (a reopened session reuses the count only with the same one)."""
    out = features.as_dict()
    if tokenizer.fingerprint is not None:
        out[_COUNTED_BY] = tokenizer.fingerprint
    return out


def _to_stored(unit: MemoryUnit, tier: str, tokenizer: Tokenizer) -> StoredUnit:
    return StoredUnit(
        id=unit.id,
        seq=unit.index,
        message=unit.message,
        tokens=unit.tokens,
        features=stored_features(unit.features, tokenizer),
        embedding=unit.embedding,
        tier=tier,  # type: ignore[arg-type]
    )

