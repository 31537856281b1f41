"""Side by side (issue 18): what the model sees through each rdmem adapter, against each framework's own
default way to fit a budget, on the LoCoMo dev conversations.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/adapters_side_by_side.py [PATH] [--budgets 1000 2000 4000]
        [--conversations N] [--questions N]   # about 15 minutes on 2 cores with the defaults

The scenario is a user chatting with an agent: the LoCoMo conversation is the
history; then its questions (categories 1-4, those with evidence) are asked
one after another, each answered with a short fixed reply, so every method
sees the same growing history. At each question every method gives what its
model would be sent (the history so far and the question, within the budget),
and the figure is **evidence recall**: the share of the question's evidence
turns present verbatim in it. Every method is re-counted here with the same
rule (cl100k, 4 tokens per message) and its mean tokens and worst overflow
are printed beside its recall, so a method that overflows the budget is seen.

Methods, per framework (same run, same histories):

- rdmem: the library (``MemoryManager.context``, the reference), the Agents
  SDK ``RdmemSession`` (``get_items()`` then ``call_model_input_filter``, as
  the runner calls them), the LangChain middleware's fit (what
  ``wrap_model_call`` sends), the LangGraph ``pre_model_hook``, the
  LlamaIndex ``RdmemMemory.get()``.
- LangChain ``trim_messages(strategy="last", start_on="human")``;
  LangChain v1 ``SummarizationMiddleware`` (``trigger=("tokens", budget)``,
  ``keep=("tokens", 0.8 × budget)``; a fake summarizer that returns a fixed
  text, so only what it keeps verbatim counts — as for rdmem);
  langmem's ``summarize_messages`` (the core of ``SummarizationNode``;
  ``max_tokens=budget``, a running summary, the same fake summarizer);
  the Agents SDK's ``SQLiteSession.get_items(limit)`` with, at each question,
  the largest ``limit`` whose items fit (more than a fixed ``limit`` could
  give); LlamaIndex ``Memory.from_defaults(token_limit=budget)``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.simplefilter("ignore")

ROOT = Path(__file__).resolve().parents[1]

from rdmem import MemoryManager  # noqa: E402
from rdmem.datasets import Conversation, load_locomo  # noqa: E402
from rdmem.embed import CachedEmbedder, get_embedder  # noqa: E402
from rdmem.tokens import content_text, get_tokenizer  # noqa: E402

TOK = get_tokenizer("cl100k_base")
ANSWER = "I am not sure; let me think about it."
SUMMARY = "Summary of the earlier conversation: the two friends talked about their lives."


def count(messages: Sequence[dict[str, Any]]) -> int:
    return TOK.messages_tokens(list(messages))


# -- the methods: each keeps its own state across the questions of one conversation ----------------------
class Method:
    """``see(question)``: the OpenAI chat messages its model would be sent; ``answered(question, reply)``."""

    name = ""
    framework = ""

    def __init__(self, history: list[dict[str, Any]], budget: int, embedder: Any) -> None:
        self.history, self.budget, self.embedder = [dict(m) for m in history], budget, embedder

    def see(self, question: str) -> list[dict[str, Any]]:
        raise NotImplementedError

    def answered(self, question: str, reply: str) -> None:
        self.history += [{"role": "user", "content": question}, {"role": "assistant", "content": reply}]


class RdmemLibrary(Method):
    name, framework = "rdmem MemoryManager", "library"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.mem = MemoryManager(budget=self.budget, policy="rd", embedder=self.embedder)
        self.mem.extend(self.history)

    def see(self, question: str) -> list[dict[str, Any]]:
        self.mem.add(role="user", content=question)
        return self.mem.context(question, warn=False).messages

    def answered(self, question: str, reply: str) -> None:
        self.mem.add(role="assistant", content=reply)


# -- LangChain / LangGraph -----------------------------------------------------------------------------
def _lc(messages: Sequence[dict[str, Any]]) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage

    return [HumanMessage(m["content"], id=str(i)) if m["role"] == "user" else AIMessage(m["content"], id=str(i))
            for i, m in enumerate(messages)]


def _from_lc(messages: Sequence[Any]) -> list[dict[str, Any]]:
    role = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}
    return [{"role": role[m.type], "content": content_text(m.content)} for m in messages]


def _lc_counter(messages: Sequence[Any]) -> int:
    return count(_from_lc(messages))


class _FakeSummarizer:
    """A chat model that answers every prompt with the same summary (no LLM here)."""

    @staticmethod
    def model() -> Any:
        from langchain_core.language_models.fake_chat_models import FakeListChatModel

        return FakeListChatModel(responses=[SUMMARY])


class LangChainTrim(Method):
    name, framework = "trim_messages(last)", "LangChain"

    def see(self, question: str) -> list[dict[str, Any]]:
        from langchain_core.messages import trim_messages

        msgs = _lc([*self.history, {"role": "user", "content": question}])
        kept = trim_messages(msgs, strategy="last", max_tokens=self.budget, token_counter=_lc_counter,
                             start_on="human", include_system=True)
        return _from_lc(kept)


class LangChainSummarization(Method):
    name, framework = "SummarizationMiddleware", "LangChain"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        from langchain.agents.middleware import SummarizationMiddleware

        self.mw = SummarizationMiddleware(_FakeSummarizer.model(), trigger=("tokens", self.budget),
                                          keep=("tokens", int(0.8 * self.budget)), token_counter=_lc_counter)
        self.state = _lc(self.history)

    def see(self, question: str) -> list[dict[str, Any]]:
        from langchain_core.messages import HumanMessage

        self.state.append(HumanMessage(question, id=f"q{len(self.state)}"))
        update = self.mw.before_model({"messages": self.state}, None)
        if update:  # RemoveMessage(REMOVE_ALL) + the summary + what it keeps
            self.state = [m for m in update["messages"] if m.type != "remove"]
        return _from_lc(self.state)

    def answered(self, question: str, reply: str) -> None:
        from langchain_core.messages import AIMessage

        self.state.append(AIMessage(reply, id=f"a{len(self.state)}"))


class LangmemSummarization(Method):
    name, framework = "langmem summarize_messages", "LangGraph"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.model, self.running = _FakeSummarizer.model(), None
        self.state = _lc(self.history)

    def see(self, question: str) -> list[dict[str, Any]]:
        from langchain_core.messages import HumanMessage
        from langmem.short_term import summarize_messages

        self.state.append(HumanMessage(question, id=f"q{len(self.state)}"))
        result = summarize_messages(self.state, running_summary=self.running, model=self.model,
                                    max_tokens=self.budget, max_summary_tokens=128, token_counter=_lc_counter)
        self.running = result.running_summary
        return _from_lc(result.messages)

    def answered(self, question: str, reply: str) -> None:
        from langchain_core.messages import AIMessage

        self.state.append(AIMessage(reply, id=f"a{len(self.state)}"))


# -- OpenAI Agents SDK ---------------------------------------------------------------------------------
def _items(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def _from_items(items: Sequence[Any]) -> list[dict[str, Any]]:
    out = []
    for it in items:
        it = dict(it) if isinstance(it, dict) else it.model_dump(exclude_unset=True)
        out.append({"role": it["role"], "content": content_text(it["content"]) if not isinstance(it["content"], str)
                    else it["content"]})
    return out


class AgentsSQLiteSession(Method):
    name, framework = "SQLiteSession.get_items(limit)", "OpenAI Agents SDK"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        from agents import SQLiteSession

        self.session = SQLiteSession("bench")
        asyncio.run(self.session.add_items(_items(self.history)))

    def see(self, question: str) -> list[dict[str, Any]]:
        q = {"role": "user", "content": question}
        room = self.budget - count([q])
        items = _from_items(asyncio.run(self.session.get_items()))
        # The largest limit whose newest items fit: more than any fixed limit gives.
        n, used = 0, 0
        while n < len(items) and used + TOK.message_tokens(items[-1 - n]) <= room:
            used += TOK.message_tokens(items[-1 - n])
            n += 1
        return _from_items(asyncio.run(self.session.get_items(limit=n))) + [q] if n else [q]

    def answered(self, question: str, reply: str) -> None:
        asyncio.run(self.session.add_items(_items([{"role": "user", "content": question},
                                                   {"role": "assistant", "content": reply}])))


# -- LlamaIndex ----------------------------------------------------------------------------------------
class _LlamaIndexMethod(Method):
    """A LlamaIndex memory (``self.memory``, made by ``_memory``) fed the history, each question and reply."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        from llama_index.core.base.llms.types import ChatMessage

        self._msg = ChatMessage
        self.memory = self._memory()
        self.memory.put_messages([ChatMessage(role=m["role"], content=m["content"]) for m in self.history])

    def _memory(self) -> Any:
        raise NotImplementedError

    def see(self, question: str) -> list[dict[str, Any]]:
        self.memory.put(self._msg(role="user", content=question))
        return [{"role": m.role.value, "content": m.content or ""} for m in self.memory.get()]

    def answered(self, question: str, reply: str) -> None:
        self.memory.put(self._msg(role="assistant", content=reply))


class LlamaIndexMemory(_LlamaIndexMethod):
    name, framework = "Memory(token_limit)", "LlamaIndex"

    def _memory(self) -> Any:
        from llama_index.core.memory import Memory

        return Memory.from_defaults(session_id="bench", token_limit=self.budget, tokenizer_fn=TOK.encode_fn)


# -- rdmem through each adapter ----------------------------------------------------------------------------
class RdmemAgentsSession(Method):
    """As ``Runner.run`` drives a session: read it, store the new input, filter the model call, store the reply."""

    name, framework = "rdmem RdmemSession + call_model_input_filter", "OpenAI Agents SDK"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        from rdmem.integrations.openai_agents import RdmemSession

        self.session = RdmemSession("bench", budget=self.budget, embedder=self.embedder)
        asyncio.run(self.session.add_items(_items(self.history)))

    def see(self, question: str) -> list[dict[str, Any]]:
        from agents.run_config import CallModelData, ModelInputData

        async def call() -> list[Any]:
            q = {"role": "user", "content": question}
            items = await self.session.get_items()
            await self.session.add_items([q])
            data = CallModelData(model_data=ModelInputData(input=[*items, q], instructions=None), agent=None,
                                 context=None)
            return (await self.session.call_model_input_filter(data)).input

        return _from_items(asyncio.run(call()))

    def answered(self, question: str, reply: str) -> None:
        asyncio.run(self.session.add_items([{"role": "assistant", "content": reply}]))


class RdmemLangChain(Method):
    """What ``RdmemMiddleware.wrap_model_call`` sends for the agent's state (the state keeps every message)."""

    name, framework = "rdmem RdmemMiddleware", "LangChain"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        from rdmem.integrations.langchain import RdmemMiddleware

        self.mw = RdmemMiddleware(budget=self.budget, session="bench", embedder=self.embedder)
        self.state = _lc(self.history)

    def see(self, question: str) -> list[dict[str, Any]]:
        from langchain_core.messages import HumanMessage

        self.state.append(HumanMessage(question, id=f"q{len(self.state)}"))
        return _from_lc(self.mw.rdmem.fit(self.state))

    def answered(self, question: str, reply: str) -> None:
        from langchain_core.messages import AIMessage

        self.state.append(AIMessage(reply, id=f"a{len(self.state)}"))


class RdmemLangGraph(RdmemLangChain):
    """What ``rdmem_pre_model_hook`` gives ``create_react_agent`` as ``llm_input_messages``."""

    name, framework = "rdmem rdmem_pre_model_hook", "LangGraph"

    def __init__(self, *args: Any) -> None:
        Method.__init__(self, *args)
        from rdmem.integrations.langchain import rdmem_pre_model_hook

        self.hook = rdmem_pre_model_hook(budget=self.budget, session="bench", embedder=self.embedder)
        self.state = _lc(self.history)

    def see(self, question: str) -> list[dict[str, Any]]:
        from langchain_core.messages import HumanMessage

        self.state.append(HumanMessage(question, id=f"q{len(self.state)}"))
        return _from_lc(self.hook({"messages": self.state})["llm_input_messages"])


class RdmemLlamaIndex(_LlamaIndexMethod):
    """What ``FunctionAgent`` reads from ``RdmemMemory`` (``get()``, the query: the newest user message)."""

    name, framework = "rdmem RdmemMemory", "LlamaIndex"

    def _memory(self) -> Any:
        from rdmem.integrations.llamaindex import RdmemMemory

        return RdmemMemory.from_defaults(session_id="bench", token_limit=self.budget, embedder=self.embedder)


METHODS: list[type[Method]] = [
    RdmemLibrary,
    RdmemLangChain, LangChainTrim, LangChainSummarization,
    RdmemLangGraph, LangmemSummarization,
    RdmemAgentsSession, AgentsSQLiteSession,
    RdmemLlamaIndex, LlamaIndexMemory,
]


# -- the run ---------------------------------------------------------------------------------------------
def run_conversation(conv: Conversation, budget: int, methods: Sequence[type[Method]], embedder: Any,
                     questions: int | None) -> dict[str, list[tuple[float, int]]]:
    """Per method: (evidence recall, tokens) of what its model saw at each question."""
    by_text = {m["content"]: m["id"] for m in conv.messages}
    history = [{"role": m["role"], "content": m["content"]} for m in conv.messages]
    probes = [p for p in conv.probes if p.evidence]
    if questions is not None and questions < len(probes):  # evenly spaced, in their order
        probes = [probes[round(i * (len(probes) - 1) / max(1, questions - 1))] for i in range(questions)]
    out: dict[str, list[tuple[float, int]]] = {}
    for cls in methods:
        try:
            method = cls(history, budget, embedder)
        except ImportError as exc:  # a framework that is not installed (langmem is not an rdmem dependency)
            print(f"{cls.name}: skipped ({exc})", file=sys.stderr)
            continue
        rows = out.setdefault(cls.name, [])
        for p in probes:
            seen = method.see(p.question)
            present = {by_text[c] for c in (content_text(m.get("content")) for m in seen) if c in by_text}
            rows.append((len(set(p.evidence) & present) / len(set(p.evidence)), count(seen)))
            method.answered(p.question, ANSWER)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", nargs="?", default=str(ROOT.parent / "shared" / "data" / "locomo" / "locomo_dev.json"))
    ap.add_argument("--budgets", type=int, nargs="+", default=[1000, 2000, 4000])
    ap.add_argument("--conversations", type=int, default=None, help="the first N conversations only")
    ap.add_argument("--questions", type=int, default=30,
                    help="N questions of each conversation, evenly spaced (default 30; 0: all)")
    args = ap.parse_args()
    convs = load_locomo(args.path, categories=[1, 2, 3, 4])[: args.conversations]
    questions = args.questions or None
    embedder = CachedEmbedder(get_embedder(None), cache_dir=ROOT / ".rdmem-cache" / "bench")
    t0 = time.time()
    results: dict[tuple[str, int], list[tuple[float, int]]] = {}
    for budget in args.budgets:
        for conv in convs:
            for name, rows in run_conversation(conv, budget, METHODS, embedder, questions).items():
                results.setdefault((name, budget), []).extend(rows)
        print(f"budget {budget} done ({time.time() - t0:.0f} s)", file=sys.stderr)
    embedder.save()
    n = len(results[(METHODS[0].name, args.budgets[0])])
    print(f"{len(convs)} conversations, {n} questions (categories 1-4 with evidence), "
          f"{time.time() - t0:.0f} s\n")
    head = " | ".join(f"{b:,}: recall / mean tokens / max" for b in args.budgets)
    print(f"| framework | method | {head} |")
    print("| --- | --- |" + " --- |" * len(args.budgets))
    for cls in METHODS:
        cells = []
        if (cls.name, args.budgets[0]) not in results:
            print(f"| {cls.framework} | {cls.name} | " + " | ".join("not installed" for _ in args.budgets) + " |")
            continue
        for b in args.budgets:
            rows = results[(cls.name, b)]
            cells.append(f"{sum(r for r, _ in rows) / len(rows):.3f} / {sum(t for _, t in rows) / len(rows):,.0f}"
                         f" / {max(t for _, t in rows):,}")
        print(f"| {cls.framework} | {cls.name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
