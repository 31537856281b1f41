"""rdmem in a LangGraph ReAct agent, offline: ``pre_model_hook`` gives the model what fits 300 tokens
(system prompt included) while the graph's state keeps every message; ``post_model_hook`` stores replies."""

import tempfile
import warnings

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.prebuilt import create_react_agent

from rdmem.integrations.langchain import rdmem_pre_model_hook

warnings.filterwarnings("ignore", "create_react_agent has been moved")  # LangGraph 1.0 prefers create_agent


class FakeModel(GenericFakeChatModel):  # a chat model that needs no network: its replies are scripted
    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, *args, **kwargs):
        peanuts = any("peanuts" in str(m.content) for m in messages)
        print(f"model call: {len(messages)} messages, peanut directive seen: {peanuts}")
        return super()._generate(messages, *args, **kwargs)


def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"{city}: sunny, 24 C"


call = {"id": "c1", "name": "weather", "args": {"city": "Lisbon"}}
model = FakeModel(messages=iter([AIMessage("", tool_calls=[call]), AIMessage("Sunny, 24 C: sardines, no peanuts.")]))
hook = rdmem_pre_model_hook(budget=300, system_prompt="You are a travel assistant.",
                            store=f"sqlite:///{tempfile.mkdtemp()}/memory.db")
agent = create_react_agent(model, [weather], pre_model_hook=hook, post_model_hook=hook.post_model_hook)
chat = [HumanMessage("Remember that I'm allergic to peanuts.")] + [
    HumanMessage(f"Note {i}: the tram to Belem leaves every {i % 9 + 5} minutes.") for i in range(120)]
result = agent.invoke({"messages": [*chat, HumanMessage("What food should I bring to a picnic?")]},
                      {"configurable": {"thread_id": "alice"}})
print(f"state: {len(result['messages'])} messages; answer: {result['messages'][-1].content}")
