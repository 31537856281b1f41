"""Optional LLM-judged QA: answer each probe from a context, score it with LoCoMo's F1 and an LLM judge.

Any OpenAI-compatible ``/chat/completions`` endpoint works. Every failure
(unreachable endpoint, timeout, HTTP 5xx, a reply that is not what was asked)
is recorded with the question as an error string and counted in the results;
it never stops a run.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .._openai import EndpointError, chat_completion
from ..errors import InvalidInput, RdmemError
from ..tokens import content_text
from .metrics import locomo_f1

__all__ = [
    "LLMConfig",
    "LLMError",
    "QAResult",
    "answer_question",
    "judge_answer",
    "parse_judgement",
    "score_question",
    "ANSWER_PROMPT",
    "JUDGE_PROMPT",
]


class LLMError(RdmemError, RuntimeError):
    """The endpoint did not give a usable reply (recorded in the results, never fatal)."""


ANSWER_PROMPT = (
    "You answer questions about a long conversation between two people, using only the memory "
    "excerpts below (each line starts with its date and speaker; '[N messages omitted]' marks "
    "parts you cannot see). Answer with a short phrase, not a sentence. Resolve relative dates "
    "('last week') against the date of the excerpt. If the excerpts do not contain the answer, "
    "say 'No information available'.\n\n"
    "Memory excerpts:\n{context}\n\nQuestion: {question}\nShort answer:"
)

# Same criteria as mem0's LoCoMo judge (generous on wording and date formats, CORRECT/WRONG as JSON).
JUDGE_PROMPT = (
    "Label a generated answer to a question as CORRECT or WRONG against a gold answer.\n"
    "The question asks about something one speaker should know about the other from their past "
    "conversations. Gold answers are short; the generated answer may be longer. Be generous: if it "
    "refers to the same thing, person or topic as the gold answer, it is CORRECT. For dates and "
    "times, it is CORRECT if it denotes the same date or period, whatever the format ('May 7th' and "
    "'7 May' agree) or if it uses a relative expression that resolves to it.\n\n"
    "Question: {question}\nGold answer: {gold}\nGenerated answer: {generated}\n\n"
    'Reply with one sentence of reasoning, then a JSON object {{"label": "CORRECT"}} or '
    '{{"label": "WRONG"}}. Never write both labels.'
)


@dataclass(frozen=True)
class LLMConfig:
    """Where and how to ask an OpenAI-compatible endpoint.

    ``judge_model`` defaults to ``model``. ``timeout`` is in seconds per request;
    ``max_answer_tokens`` caps the answer's length (tokens).
    """

    base_url: str
    model: str
    api_key: str | None = None
    judge_model: str | None = None
    timeout: float = 60.0
    max_answer_tokens: int = 64

    def __post_init__(self) -> None:
        if not isinstance(self.base_url, str) or not self.base_url.startswith(("http://", "https://")):
            raise InvalidInput(f"base_url must be an http(s) URL, got {self.base_url!r}")
        if not isinstance(self.model, str) or not self.model:
            raise InvalidInput(f"model must be a non-empty string, got {self.model!r}")
        if not (isinstance(self.timeout, (int, float)) and self.timeout > 0):
            raise InvalidInput(f"timeout must be > 0 seconds, got {self.timeout!r}")
        if isinstance(self.max_answer_tokens, bool) or not isinstance(self.max_answer_tokens, int) or self.max_answer_tokens < 1:
            raise InvalidInput(f"max_answer_tokens must be an int >= 1, got {self.max_answer_tokens!r}")

    @classmethod
    def from_env(
        cls,
        base_url: str | None = None,
        model: str | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> LLMConfig | None:
        """A config from arguments, else ``RDMEM_LLM_BASE_URL``/``RDMEM_LLM_MODEL``/``OPENAI_API_KEY``;
        ``None`` when no endpoint is configured (LLM QA is then skipped)."""
        env = os.environ if environ is None else environ
        base = base_url or env.get("RDMEM_LLM_BASE_URL")
        name = model or env.get("RDMEM_LLM_MODEL")
        if not base and not name:
            return None
        if not base:
            raise InvalidInput("an LLM model is set but no endpoint: pass --llm-base-url or set RDMEM_LLM_BASE_URL")
        if not name:
            raise InvalidInput("an LLM endpoint is set but no model: pass --llm-model or set RDMEM_LLM_MODEL")
        kwargs.setdefault("api_key", env.get("OPENAI_API_KEY"))
        return cls(base_url=base.rstrip("/"), model=name, **kwargs)

    def describe(self) -> dict[str, Any]:
        """The config without the API key (for results files)."""
        return {"base_url": self.base_url, "model": self.model, "judge_model": self.judge_model or self.model,
                "timeout": self.timeout}


def _ask(cfg: LLMConfig, model: str, prompt: str, max_tokens: int) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "temperature": 0, "max_tokens": max_tokens}
    try:
        return chat_completion(cfg.base_url, body, cfg.api_key, cfg.timeout).strip()
    except EndpointError as exc:
        raise LLMError(str(exc)) from None


def answer_question(cfg: LLMConfig, question: str, messages: Iterable[Mapping[str, Any]]) -> str:
    """The model's short answer to ``question`` from the rendered context ``messages``."""
    ctx = context_text_with_markers(messages)
    return _ask(cfg, cfg.model, ANSWER_PROMPT.format(context=ctx, question=question), cfg.max_answer_tokens)


def context_text_with_markers(messages: Iterable[Mapping[str, Any]]) -> str:
    """The context as the answering model reads it: one message per line, rdmem's markers kept."""
    return "\n".join(content_text(m.get("content")) for m in messages)


_LABEL_JSON = re.compile(r'"label"\s*:\s*"(CORRECT|WRONG)"', re.IGNORECASE)
_LABEL_WORD = re.compile(r"\b(CORRECT|WRONG)\b")


def parse_judgement(reply: str) -> bool:
    """``True`` for CORRECT, ``False`` for WRONG; :class:`LLMError` when the reply has neither or both."""
    found = {m.upper() for m in _LABEL_JSON.findall(reply)}
    if not found:
        found = set(_LABEL_WORD.findall(reply))
    if len(found) != 1:
        what = "both labels" if len(found) > 1 else "no CORRECT/WRONG label"
        raise LLMError(f"judge reply has {what}: {reply[:80]!r}")
    return found == {"CORRECT"}


def judge_answer(cfg: LLMConfig, question: str, gold: str, generated: str) -> bool:
    """The judge's verdict on ``generated`` against ``gold`` (mem0's CORRECT/WRONG protocol)."""
    prompt = JUDGE_PROMPT.format(question=question, gold=gold, generated=generated)
    return parse_judgement(_ask(cfg, cfg.judge_model or cfg.model, prompt, 128))


@dataclass(frozen=True)
class QAResult:
    """One question answered by the LLM: the answer, its F1, the judge's verdict, and any error."""

    answer: str | None
    f1: float
    judge: float
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"llm_answer": self.answer, "qa_f1": self.f1, "judge": self.judge, "llm_error": self.error}


def score_question(
    cfg: LLMConfig,
    question: str,
    gold: str | None,
    category: int | None,
    messages: Iterable[Mapping[str, Any]],
) -> QAResult:
    """Answer from ``messages``, then score: LoCoMo F1, and the judge (skipped, NaN, for category 5).

    Never raises for endpoint trouble: the error is returned in :attr:`QAResult.error`
    and the scores are NaN (so they are left out of the means and counted as errors).
    """
    try:
        answer = answer_question(cfg, question, messages)
    except LLMError as exc:
        return QAResult(None, math.nan, math.nan, f"answer: {exc}")
    if gold is None:
        return QAResult(answer, math.nan, math.nan)
    f1 = locomo_f1(answer, gold, category)
    if category == 5:
        return QAResult(answer, f1, math.nan)
    try:
        verdict = judge_answer(cfg, question, gold, answer)
    except LLMError as exc:
        return QAResult(answer, f1, math.nan, f"judge: {exc}")
    return QAResult(answer, f1, float(verdict))
