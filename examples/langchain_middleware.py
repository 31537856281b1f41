"""rdmem in a LangChain v1 agent, offline: a fake chat model calls a tool, then answers; every call it
gets fits 300 tokens (system prompt included), while the agent's state keeps all 125 messages."""

import tempfile

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool

from rdmem.integrations.langchain import RdmemMiddleware


class FakeModel(GenericFakeChatModel):  # a chat model that needs no network: its replies are scripted
    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, *args, **kwargs):
        peanuts = any("peanuts" in str(m.content) for m in messages)
        print(f"model call: {len(messages)} messages, peanut directive seen: {peanuts}")
        return super()._generate(messages, *args, **kwargs)


@tool
def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"{city}: sunny, 24 C"


call = {"id": "c1", "name": "weather", "args": {"city": "Lisbon"}}
model = FakeModel(messages=iter([AIMessage("", tool_calls=[call]), AIMessage("Sunny, 24 C: sardines, no peanuts.")]))
memory = RdmemMiddleware(budget=300, store=f"sqlite:///{tempfile.mkdtemp()}/memory.db")
agent = create_agent(model, tools=[weather], system_prompt="You are a travel assistant.", middleware=[memory])
chat = [HumanMessage("Remember that I'm allergic to peanuts.")] + [
    HumanMessage(f"Note {i}: the tram to Belem leaves every {i % 9 + 5} minutes.") for i in range(120)]
result = agent.invoke({"messages": [*chat, HumanMessage("What food should I bring to a picnic?")]},
                      {"configurable": {"thread_id": "alice"}})
print(f"state: {len(result['messages'])} messages; answer: {result['messages'][-1].content}")
