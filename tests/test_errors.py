"""One exception tree (rdmem.errors): what a caller can fix is InvalidInput at every front door; nothing else is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import rdmem
from rdmem import MemoryManager, compact, get_policy, get_tokenizer, open_store
from rdmem.errors import (
    DuplicateIdError, InvalidInput, InvalidType, MissingDependency, RdmemError, StoreError, UnknownIdError,
    VersionConflict,
)
from rdmem.store import KeyStore, MemoryStore, NewUnit

from ._checks import HashingEmbedder

SRC = Path(__file__).resolve().parents[1] / "src" / "rdmem"


def test_the_tree_keeps_the_builtin_bases_callers_already_catch():
    assert issubclass(InvalidInput, RdmemError) and issubclass(InvalidInput, ValueError)
    assert issubclass(InvalidType, InvalidInput) and issubclass(InvalidType, TypeError)
    assert issubclass(MissingDependency, RdmemError) and issubclass(MissingDependency, ImportError)
    assert issubclass(StoreError, RdmemError) and issubclass(StoreError, RuntimeError)
    assert issubclass(DuplicateIdError, StoreError) and issubclass(DuplicateIdError, InvalidInput)
    assert issubclass(UnknownIdError, InvalidInput) and not issubclass(UnknownIdError, StoreError)
    assert issubclass(VersionConflict, StoreError) and not issubclass(VersionConflict, InvalidInput)
    assert not issubclass(StoreError, InvalidInput)
    # the same classes from every place they were importable before
    assert rdmem.StoreError is StoreError and rdmem.store.DuplicateIdError is DuplicateIdError
    assert rdmem.InvalidInput is InvalidInput


@pytest.mark.parametrize("call, kind, message", [
    (lambda: compact([{"role": "user", "content": "hi"}], budget=0), InvalidInput, "budget must be > 0 tokens, got 0"),
    (lambda: compact([{"role": "user", "content": "hi"}], budget="9"), InvalidType,
     "budget must be an int number of tokens, got str"),
    (lambda: compact([{"role": "robot", "content": "hi"}], budget=50), InvalidInput,
     "message 0: invalid role 'robot'; expected one of system, developer, user, assistant, tool"),
    (lambda: compact([{"role": "user", "content": 5}], budget=50), InvalidInput,
     "message 0: 'content' must be a string, a list of text parts or null, got int"),
    (lambda: compact(["hi"], budget=50), InvalidType, "message 0 must be a dict with 'role' and 'content', got str"),
    (lambda: get_policy("nope"), InvalidInput, "unknown policy 'nope'; choose one of "),
    (lambda: get_tokenizer("nope"), InvalidInput, "unknown tokenizer 'nope'"),
    (lambda: open_store("bogus://x"), InvalidInput, "unknown store URL 'bogus://x'"),
    (lambda: open_store(5), InvalidType, "store must be a URL string or a Store, got int"),
    (lambda: MemoryManager(budget=100, low=0.9, high=0.5), InvalidInput, "watermarks must satisfy 0 < low <= high"),
    (lambda: MemoryManager(budget=100, session=""), InvalidInput, "session must be a non-empty string, got ''"),
    (lambda: MemoryStore().append("", []), InvalidInput, "session must be a non-empty string, got ''"),
    (lambda: MemoryStore().set_tier("s", "abc", "working"), InvalidType, "ids must be a list of message ids, got str"),
    (lambda: KeyStore(MemoryStore()).create_key("a/b"), InvalidInput, "tenant must be 1-64 letters"),
    # "$" matched before a final newline: a key was made for "acme\n" (store names "t/acme\n/x")
    (lambda: KeyStore(MemoryStore()).create_key("acme\n"), InvalidInput, "tenant must be 1-64 letters"),
])
def test_caller_errors_are_invalid_input_with_the_same_messages(call, kind, message):
    with pytest.raises(kind, match=re.escape(message)):
        call()


def test_store_caller_faults_are_invalid_input_too():
    store = MemoryStore()
    store.append("s", [NewUnit({"role": "user", "content": "a"}, 1, id="x")])
    with pytest.raises(DuplicateIdError, match="already has a message with id 'x'") as dup:
        store.append("s", [NewUnit({"role": "user", "content": "b"}, 1, id="x")])
    assert isinstance(dup.value, InvalidInput)
    mem = MemoryManager(budget=100, policy="rd", store=store, session="s", embedder=HashingEmbedder())
    with pytest.raises(UnknownIdError, match=r"unknown ids in feedback: \['nope'\]"):
        mem.feedback(["nope"], 1.0)


#: Modules whose ``ValueError``/``TypeError`` checks guard arguments only rdmem's own code (or a policy
#: writer's) passes: arrays, shapes, internal budgets. Reaching one from a front door is a bug, so they are
#: not InvalidInput (the service answers them with a 500, not a 4xx blaming the client).
ALGORITHMS = {
    "select/_validate.py", "select/chain.py", "select/greedy.py", "select/mckp.py", "select/coverage.py",
    "deps.py", "scoring/logistic.py", "lm/presses.py", "eval/metrics.py",
    "server/routes_proxy.py",  # raised inside the proxy's fail-open block, never answered to a client
}


def test_front_door_modules_raise_invalid_input_not_bare_value_errors():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel in ALGORITHMS:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"\braise (ValueError|TypeError)\(", line):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, "caller errors are rdmem.errors.InvalidInput (InvalidType for a wrong type):\n" + "\n".join(found)
