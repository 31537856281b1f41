"""An OpenAI Agents SDK agent whose session lives in rdmem (offline: a scripted model, SQLite in a temp dir)."""

import asyncio
import tempfile

from agents import Agent, RunConfig, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from rdmem.integrations.openai_agents import RdmemSession


@function_tool
def find_restaurants(area: str) -> str:
    """Restaurants open tonight in an area of Lisbon."""
    return f"In {area}: Tasca do Chico (grilled fish), Thai Garden (satay, peanut sauce)."


async def main(db: str) -> None:
    session = RdmemSession("alice", store=f"sqlite:///{db}", budget=400)
    await session.add_items([{"role": "user", "content": "Remember that I'm allergic to peanuts."}] + [
        {"role": "user", "content": f"Day {i}: what about the tram to Belem and the museums?"} for i in range(40)])
    model = ScriptedModel([[function_call("find_restaurants", {"area": "Alfama"}, call_id="c1")],
                           [assistant_message("Tasca do Chico: grilled fish, no peanuts. Skip Thai Garden.")]])
    agent = Agent(name="guide", instructions="Answer briefly.", model=model, tools=[find_restaurants])
    config = RunConfig(call_model_input_filter=session.call_model_input_filter, tracing_disabled=True)
    result = await Runner.run(agent, "Where can I eat tonight in Alfama?", session=session, run_config=config)
    for n, call in enumerate(model.calls, 1):
        directive = any("allergic" in str(item.get("content")) for item in call.input)
        print(f"model call {n}: {len(call.input)} items, peanut directive: {'yes' if directive else 'no'}")
    print(f"stored: {len(await session.all_items())} items; answer: {result.final_output}")


with tempfile.TemporaryDirectory() as tmp:
    asyncio.run(main(f"{tmp}/memory.db"))
