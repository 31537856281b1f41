"""rdmem demo: one agent conversation, compacted by every policy, then streamed into a MemoryManager.

Run with ``make demo`` (offline: the embedding model and the tokenizer come from
local packages). The conversation below was written for this project: a user
plans a trip to Kyoto with an assistant that can call tools.
"""

from __future__ import annotations

import json
import os
import tempfile
import textwrap
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import rdmem  # noqa: E402
from rdmem import MemoryManager, compact, get_tokenizer  # noqa: E402


def tool_call(cid: str, name: str, **arguments: object) -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def conversation() -> list[dict]:
    """50 messages: a system prompt, directives, tool calls with results, corrections and chit-chat."""
    turns: list[tuple[str, str, dict]] = [
        ("system", "You are Kite, a travel-planning assistant. Be concise. Quote prices in the user's currency.", {}),
        ("user", "Hi Kite! I'm planning a trip to Kyoto with my partner Sam in April.", {}),
        ("assistant", "Lovely! Cherry blossom season. Which dates are you thinking of, and from which city?", {}),
        ("user", "From Lisbon, roughly 3 to 12 April 2026. Remember that I'm allergic to peanuts.", {}),
        ("assistant", "Noted: peanut allergy. I'll flag it for every restaurant suggestion.", {}),
        ("user", "From now on, give all prices in EUR please.", {}),
        ("assistant", "Will do, all prices in EUR from now on.", {}),
        ("user", "Can you look for flights?", {}),
        ("assistant", None, {"tool_calls": [tool_call("call_f1", "search_flights", origin="LIS", destination="KIX",
                                                        depart="2026-04-03", back="2026-04-12", passengers=2)]}),
        ("tool", "LIS-KIX 3 Apr: Emirates via DXB 14:05, 1,180 EUR pp; Turkish via IST 11:40, 960 EUR pp; "
                 "Qatar via DOH 20:10, 1,050 EUR pp. Remember to check visa rules.", {"tool_call_id": "call_f1"}),
        ("assistant", "Three options: Turkish 960 EUR, Qatar 1,050 EUR, Emirates 1,180 EUR per person.", {}),
        ("user", "Turkish is fine. lol my cat just walked over the keyboard", {}),
        ("assistant", "Ha, say hi to the cat! Turkish it is: 1,920 EUR for two.", {}),
        ("user", "Where should we stay? Something quiet, near a train station.", {}),
        ("assistant", None, {"tool_calls": [
            tool_call("call_h1", "search_hotels", city="Kyoto", near="Kyoto Station", checkin="2026-04-04", nights=8),
            tool_call("call_h2", "search_hotels", city="Kyoto", near="Demachiyanagi", checkin="2026-04-04", nights=8)]}),
        ("tool", "Near Kyoto Station: Hotel Granvia 210 EUR/night; Sakura Terrace 95 EUR/night (quiet, rooftop).",
         {"tool_call_id": "call_h1"}),
        ("tool", "Near Demachiyanagi: Riverside Machiya 140 EUR/night, whole townhouse, very quiet.",
         {"tool_call_id": "call_h2"}),
        ("assistant", "Quiet picks: Sakura Terrace (95 EUR) by Kyoto Station, or Riverside Machiya (140 EUR), "
                      "a townhouse near Demachiyanagi.", {}),
        ("user", "The machiya sounds magical. Book it for 8 nights.", {}),
        ("assistant", None, {"tool_calls": [tool_call("call_b1", "book_hotel", hotel="Riverside Machiya", nights=8)]}),
        ("tool", "Booked: Riverside Machiya, 4-12 April 2026, confirmation KX-4471, 1,120 EUR total.",
         {"tool_call_id": "call_b1"}),
        ("assistant", "Booked! Riverside Machiya, confirmation KX-4471, 1,120 EUR for 8 nights.", {}),
        ("user", "Actually, Sam's sister Mei is joining, so we're three people now.", {}),
        ("assistant", "Got it, three travellers. The machiya sleeps four, so no change needed there; "
                      "I'll add a third flight seat.", {}),
        ("user", "Thanks. How's the weather in early April?", {}),
        ("assistant", None, {"tool_calls": [tool_call("call_w1", "weather_normals", city="Kyoto", month=4)]}),
        ("tool", "Kyoto in April: highs 19 C, lows 8 C, 11 rainy days, sakura peak usually 1-10 April.",
         {"tool_call_id": "call_w1"}),
        ("assistant", "Mild: about 19 C by day, 8 C at night, some rain. Blossoms usually peak 1-10 April.", {}),
        ("user", "Perfect timing then! ok ok", {}),
        ("assistant", "It really is.", {}),
        ("user", "Always suggest vegetarian options first, Mei is vegetarian.", {}),
        ("assistant", "Understood: vegetarian options first, and peanut-free for you.", {}),
        ("user", "What day trips would you suggest?", {}),
        ("assistant", "Nara (deer park, Todai-ji), 45 min by train; Arashiyama bamboo grove; "
                      "Uji for matcha; and Himeji Castle if you want a longer day.", {}),
        ("user", "Nara on the 6th, Uji on the 9th. Not Himeji.", {}),
        ("assistant", "Plan: Nara on 6 April, Uji on 9 April, no Himeji.", {}),
        ("user", "haha Sam says the deer will eat my map", {}),
        ("assistant", "They might! Keep snacks hidden.", {}),
        ("user", "Any restaurant for our first night?", {}),
        ("assistant", "Shigetsu in Tenryu-ji serves Buddhist vegetarian cuisine (no peanuts on request), "
                      "about 45 EUR per person; book two weeks ahead.", {}),
        ("user", "Sounds great. Also, what's the budget so far?", {}),
        ("assistant", "Flights 2,880 EUR for three, machiya 1,120 EUR: 4,000 EUR so far.", {}),
        ("user", "Wait, change the flight date: we leave on the 2nd, not the 3rd.", {}),
        ("assistant", "Noted: departure moves to 2 April 2026. I'll recheck the Turkish fare for that day.", {}),
        ("user", "cool cool. do we need a JR pass?", {}),
        ("assistant", "Probably not: Kyoto-Nara and Kyoto-Uji are cheap local lines. An ICOCA card is enough.", {}),
        ("user", "Great. Can you summarise everything tomorrow?", {}),
        ("assistant", "Of course. I'll send a full summary tomorrow morning.", {}),
        ("user", "Thanks Kite, talk soon!", {}),
        ("assistant", "Safe travels planning! Bye for now.", {}),
    ]
    messages = []
    for i, (role, content, extra) in enumerate(turns):
        messages.append({"id": f"t{i:02d}", "role": role, "content": content, **extra})
    return messages


def ranges(ids: list[str], order: list[str]) -> str:
    """Kept ids as compact runs: t00, t03-t07, t12."""
    pos = sorted(order.index(i) for i in ids)
    runs: list[list[int]] = []
    for p in pos:
        if runs and p == runs[-1][-1] + 1:
            runs[-1].append(p)
        else:
            runs.append([p])
    return ", ".join(order[r[0]] if len(r) == 1 else f"{order[r[0]]}-{order[r[-1]]}" for r in runs)


def main() -> None:
    warnings.simplefilter("ignore", RuntimeWarning)  # the offline-tokenizer notice
    messages = conversation()
    order = [m["id"] for m in messages]
    tok = get_tokenizer("cl100k_base")
    before = tok.messages_tokens([{k: v for k, v in m.items() if k != "id"} for m in messages])
    print(f"rdmem {rdmem.__version__} demo: a trip-planning conversation of {len(messages)} messages, "
          f"{before} tokens (cl100k_base, 4 tokens per message overhead)\n")

    header = f"{'policy':<15} {'budget':>6} {'before':>6} {'after':>6} {'kept':>4} {'summ':>4}  kept ids"
    print(header)
    print("-" * len(header))
    for budget in (300, 600):
        for name in sorted(rdmem.POLICIES):
            result = compact(messages, budget=budget, policy=name)
            print(f"{name:<15} {budget:>6} {before:>6} {result.tokens:>6} {len(result.kept_ids):>4} "
                  f"{len(result.summarized_ids):>4}  {ranges(result.kept_ids, order)}")
        print()

    directives = {"t03": "peanut allergy", "t05": "prices in EUR", "t30": "vegetarian first"}
    print("Directives kept at 300 tokens:")
    for name in sorted(rdmem.POLICIES):
        kept = compact(messages, budget=300, policy=name).kept_ids
        print(f"  {name:<15} " + ", ".join(f"{what} {'yes' if mid in kept else 'no'}" for mid, what in directives.items()))

    query = "Which hotel did we book and what is the confirmation number?"
    result = compact(messages, budget=300, policy="rd", query=query)
    print(f"\nQuery-aware (rd, 300 tokens) for {query!r}:")
    for m in result.messages:
        text = m["content"] if m["content"] is not None else json.dumps(m.get("tool_calls"))[:70] + "..."
        print("  " + textwrap.shorten(f"[{m['role']}] {text}", width=108))

    print("\nMemoryManager: the same conversation streamed in, SQLite store, budget 400 tokens")
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/memory.db"
        with MemoryManager(budget=400, policy="rd", store=url, session="kyoto") as mem:
            compactions = 0
            previous: list[str] = []
            for m in messages:
                mem.add(m)
                now = mem.working_ids()
                if now[: len(previous)] != previous:
                    compactions += 1
                previous = now
            working = mem.working_ids()
            print(f"  {len(mem)} messages stored, {compactions} compactions "
                  f"(high {mem.high:g} x budget -> low {mem.low:g} x budget)")
            print(f"  working set: {len(working)} messages ({ranges(working, order)}); "
                  f"archived: {len(mem.archived_ids())}")
            ctx = mem.context(query="What should the restaurant know about our diets?")
            print(f"  context for a diet question: {ctx.tokens} tokens, kept {ranges(ctx.kept_ids, order)}")
        with MemoryManager(budget=400, policy="rd", store=url, session="kyoto") as again:
            print(f"  reopened from {os.path.basename(url)}: {len(again)} messages, "
                  f"same working set: {again.working_ids() == working}")


if __name__ == "__main__":
    main()
