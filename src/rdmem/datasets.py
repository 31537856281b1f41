"""Labelled conversations (for evaluation and training): LoCoMo and users' own JSONL logs, as messages plus probes.

A :class:`Conversation` is a chat history (OpenAI-style messages, each with an
``id``) and optional :class:`Probe` questions about it. Both loaders validate
their input and raise :class:`DatasetError` naming the file, the line (JSONL)
or the sample (LoCoMo), and the problem.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InvalidInput
from .units import normalize_messages

__all__ = [
    "Conversation",
    "Probe",
    "DatasetError",
    "load_locomo",
    "locomo_conversation",
    "load_jsonl",
    "parse_jsonl_line",
    "LOCOMO_CATEGORIES",
]

#: LoCoMo's question categories, as its official evaluation code scores them.
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


class DatasetError(InvalidInput):
    """Evaluation data that cannot be used; the message names the file and the line or sample."""


@dataclass(frozen=True)
class Probe:
    """A question about a conversation.

    ``evidence`` holds the ids of the messages that answer it (empty: unknown,
    so evidence metrics skip it); ``answer`` is the gold answer (``None``:
    unknown); ``category`` is LoCoMo's question category (``None`` elsewhere).
    """

    question: str
    answer: str | None = None
    evidence: tuple[str, ...] = ()
    category: int | None = None
    id: str = ""


@dataclass(frozen=True)
class Conversation:
    """A chat history to compact (each message has an ``id``) and the probes asked about it.

    ``notes`` records repairs made while loading (evidence ids that were
    malformed or named no message), so results say what was left out.
    """

    id: str
    messages: tuple[dict[str, Any], ...]
    probes: tuple[Probe, ...] = ()
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def ids(self) -> list[str]:
        return [str(m["id"]) for m in self.messages]

    def select(self, categories: Iterable[int] | None) -> Conversation:
        """The same conversation with only the probes of ``categories`` (``None``: all)."""
        if categories is None:
            return self
        keep = set(categories)
        probes = tuple(p for p in self.probes if p.category is None or p.category in keep)
        return Conversation(self.id, self.messages, probes, self.notes)


# -- LoCoMo -----------------------------------------------------------------

_SESSION = re.compile(r"^session_(\d+)$")
_DIA = re.compile(r"^D(\d+):(\d+)$")


def _clean_evidence(raw: Any, known: set[str]) -> tuple[tuple[str, ...], list[str]]:
    """LoCoMo evidence ids, repaired where the intent is clear; the rest dropped with a note.

    A few entries in the original data join two ids with ``;`` (``"D8:6; D9:17"``)
    or carry a stray colon (``"D:11:26"``); they are split and fixed. Ids that
    still name no turn (``"D"``, or a turn that does not exist) are dropped.
    """
    items = raw if isinstance(raw, list) else [raw]
    out: list[str] = []
    dropped: list[str] = []
    for item in items:
        for part in re.split(r"[;,\s]+", str(item)):
            if not part:
                continue
            fixed = part if _DIA.match(part) else re.sub(r"^D:(\d+):(\d+)$", r"D\1:\2", part)
            if fixed in known:
                if fixed not in out:
                    out.append(fixed)
            else:
                dropped.append(part)
    return tuple(out), dropped


def locomo_conversation(sample: Mapping[str, Any], *, name: str = "<locomo>") -> Conversation:
    """One LoCoMo sample as a :class:`Conversation`.

    Each turn becomes a message with id = ``dia_id`` and content
    ``"[<session date>] <speaker>: <text>"``, plus ``" [shares a photo: <caption>]"``
    when the turn has a ``blip_caption``; speaker A is ``user``, speaker B
    ``assistant``.

    >>> conv = locomo_conversation({"sample_id": "x", "conversation": {
    ...     "speaker_a": "Ann", "speaker_b": "Bob", "session_1_date_time": "1 May, 2023",
    ...     "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "Hi!"},
    ...                   {"speaker": "Bob", "dia_id": "D1:2", "text": "Look.", "blip_caption": "a cat"}]},
    ...     "qa": [{"question": "Who?", "answer": "Bob", "evidence": ["D1:2"], "category": 4}]})
    >>> [(m["id"], m["role"], m["content"]) for m in conv.messages]
    [('D1:1', 'user', '[1 May, 2023] Ann: Hi!'), ('D1:2', 'assistant', '[1 May, 2023] Bob: Look. [shares a photo: a cat]')]
    >>> conv.probes[0].evidence
    ('D1:2',)
    """
    sid = str(sample.get("sample_id", "?"))
    where = f"{name}: sample {sid}"
    conv = sample.get("conversation")
    if not isinstance(conv, Mapping):
        raise DatasetError(f"{where}: missing 'conversation' object")
    speaker_a = conv.get("speaker_a")
    if not isinstance(speaker_a, str):
        raise DatasetError(f"{where}: 'conversation' has no 'speaker_a'")
    sessions = sorted((int(m.group(1)), k) for k in conv if (m := _SESSION.match(k)))
    messages: list[dict[str, Any]] = []
    for num, key in sessions:
        turns = conv[key]
        if not isinstance(turns, list):
            raise DatasetError(f"{where}: {key} must be a list of turns, got {type(turns).__name__}")
        date = conv.get(f"{key}_date_time", "")
        for j, turn in enumerate(turns):
            if not isinstance(turn, Mapping) or not all(isinstance(turn.get(k), str) for k in ("speaker", "dia_id", "text")):
                raise DatasetError(f"{where}: {key} turn {j} needs string 'speaker', 'dia_id' and 'text'")
            content = f"[{date}] {turn['speaker']}: {turn['text']}"
            caption = turn.get("blip_caption")
            if isinstance(caption, str) and caption:
                content += f" [shares a photo: {caption}]"
            role = "user" if turn["speaker"] == speaker_a else "assistant"
            messages.append({"id": turn["dia_id"], "role": role, "content": content})
    try:
        normalize_messages(messages)
    except ValueError as exc:
        raise DatasetError(f"{where}: {exc}") from None
    known = {m["id"] for m in messages}
    probes: list[Probe] = []
    notes: list[str] = []
    for k, qa in enumerate(sample.get("qa") or ()):
        if not isinstance(qa, Mapping) or not isinstance(qa.get("question"), str):
            raise DatasetError(f"{where}: qa {k} needs a string 'question'")
        evidence, dropped = _clean_evidence(qa.get("evidence") or [], known)
        if dropped:
            notes.append(f"{sid} qa {k}: evidence {', '.join(map(repr, dropped))} names no turn; dropped")
        answer = qa.get("answer", qa.get("adversarial_answer"))
        category = qa.get("category")
        probes.append(
            Probe(
                question=qa["question"],
                answer=None if answer is None else str(answer),
                evidence=evidence,
                category=int(category) if isinstance(category, (int, str)) and str(category).isdigit() else None,
                id=f"{sid}/q{k}",
            )
        )
    return Conversation(sid, tuple(messages), tuple(probes), tuple(notes))


def load_locomo(path: str | Path, *, categories: Iterable[int] | None = None) -> list[Conversation]:
    """All samples of a LoCoMo file (``locomo10.json`` format), probes filtered to ``categories``."""
    p = Path(path)
    if not p.is_file():
        raise DatasetError(f"{path}: no such file")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise DatasetError(f"{path}: the JSON nests too deeply to read") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read ({exc})") from None
    if isinstance(data, Mapping):
        data = [data]
    if not isinstance(data, list) or not data:
        raise DatasetError(f"{path}: expected a JSON list of LoCoMo samples")
    cats = None if categories is None else list(categories)
    return [locomo_conversation(s, name=str(path)).select(cats) for s in data]


# -- JSONL ------------------------------------------------------------------


def parse_jsonl_line(line: str, lineno: int, *, name: str = "<jsonl>") -> Conversation:
    """One JSONL line: ``{"id": ..., "messages": [...], "probes": [{"question", "answer", "evidence"}]}``.

    Messages without an ``id`` get ``m<index>``; probes are optional and each
    of their fields but ``question`` is optional. Errors name the line.
    """
    where = f"{name}: line {lineno}"
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{where}: invalid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise DatasetError(f"{where}: the JSON nests too deeply to read") from None
    if not isinstance(obj, Mapping):
        raise DatasetError(f"{where}: expected an object with 'messages', got {type(obj).__name__}")
    unknown = set(obj) - {"id", "messages", "probes"}
    if unknown:
        raise DatasetError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; allowed: id, messages, probes")
    cid = obj.get("id", f"line{lineno}")
    if not isinstance(cid, (str, int)) or isinstance(cid, bool):
        raise DatasetError(f"{where}: 'id' must be a string or an int, got {type(cid).__name__}")
    raw = obj.get("messages")
    if not isinstance(raw, list) or not raw:
        raise DatasetError(f"{where}: 'messages' must be a non-empty list of chat messages")
    try:
        pairs = normalize_messages(raw)
    except (ValueError, TypeError) as exc:
        raise DatasetError(f"{where}: {exc}") from None
    messages = tuple({"id": mid, **msg} for mid, msg in pairs)
    known = {m["id"] for m in messages}
    probes: list[Probe] = []
    raw_probes = obj.get("probes", [])
    if not isinstance(raw_probes, list):
        raise DatasetError(f"{where}: 'probes' must be a list, got {type(raw_probes).__name__}")
    for k, pr in enumerate(raw_probes):
        if not isinstance(pr, Mapping) or not isinstance(pr.get("question"), str) or not pr["question"].strip():
            raise DatasetError(f"{where}: probe {k} needs a non-empty string 'question'")
        extra = set(pr) - {"question", "answer", "evidence", "category", "id"}
        if extra:
            raise DatasetError(f"{where}: probe {k}: unknown key(s) {', '.join(sorted(extra))}")
        answer = pr.get("answer")
        if answer is not None and not isinstance(answer, (str, int, float)):
            raise DatasetError(f"{where}: probe {k}: 'answer' must be a string or a number")
        ev = pr.get("evidence", [])
        if not isinstance(ev, list) or not all(isinstance(e, (str, int)) and not isinstance(e, bool) for e in ev):
            raise DatasetError(f"{where}: probe {k}: 'evidence' must be a list of message ids")
        missing = [str(e) for e in ev if str(e) not in known]
        if missing:
            raise DatasetError(f"{where}: probe {k}: evidence id(s) {', '.join(map(repr, missing))} name no message")
        cat = pr.get("category")
        if cat is not None and (isinstance(cat, bool) or not isinstance(cat, int)):
            raise DatasetError(f"{where}: probe {k}: 'category' must be an int")
        probes.append(
            Probe(
                question=pr["question"],
                answer=None if answer is None else str(answer),
                evidence=tuple(dict.fromkeys(str(e) for e in ev)),
                category=cat,
                id=str(pr.get("id", f"{cid}/q{k}")),
            )
        )
    return Conversation(str(cid), messages, tuple(probes))


def load_jsonl(path: str | Path) -> list[Conversation]:
    """Conversations from a JSONL file, one per line (blank lines skipped).

    Raises :class:`DatasetError` listing every bad line with its number (up
    to 20), so one run shows all the problems; duplicate conversation ids are
    errors too.
    """
    p = Path(path)
    if not p.is_file():
        raise DatasetError(f"{path}: no such file")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read ({exc})") from None
    return parse_jsonl(text.splitlines(), name=str(path))


def parse_jsonl(lines: Sequence[str], *, name: str = "<jsonl>") -> list[Conversation]:
    """Conversations from JSONL lines (see :func:`load_jsonl`)."""
    out: list[Conversation] = []
    errors: list[str] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            conv = parse_jsonl_line(line, lineno, name=name)
        except DatasetError as exc:
            errors.append(str(exc))
            continue
        if conv.id in seen:
            errors.append(f"{name}: line {lineno}: duplicate conversation id {conv.id!r} (first on line {seen[conv.id]})")
            continue
        seen[conv.id] = lineno
        out.append(conv)
    if errors:
        more = f"\n... and {len(errors) - 20} more bad lines" if len(errors) > 20 else ""
        raise DatasetError("\n".join(errors[:20]) + more)
    if not out:
        raise DatasetError(f"{name}: no conversations (the file is empty)")
    return out
