"""rdmem inside agent frameworks: one module per framework, each importing its framework only itself.

- :mod:`rdmem.integrations.openai_agents` — a ``Session`` for the OpenAI Agents SDK
  (``pip install 'rdmem[openai-agents]'``);
- :mod:`rdmem.integrations.langchain` — a LangChain ``create_agent`` middleware and a
  LangGraph ``pre_model_hook`` (``pip install 'rdmem[langchain]'``);
- :mod:`rdmem.integrations.llamaindex` — a LlamaIndex ``BaseMemory`` (``pip install 'rdmem[llamaindex]'``);

Every adapter keeps each message the framework gives it, whole, in an rdmem
session (any store), and gives the model what fits its budget: rdmem's
context for the newest question, the framework's own message objects back
where they are sent verbatim.

The MCP server is a front door of its own, :mod:`rdmem.mcp` (``rdmem.integrations.mcp`` re-exports it, deprecated).
"""

__all__: list[str] = []
