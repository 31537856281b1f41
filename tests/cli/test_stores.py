"""Store URLs at the command line: commands that only read (or change a store) create nothing, a refused
``rdmem serve`` leaves nothing behind, and a URL is printed without its password."""

from __future__ import annotations

from pathlib import Path

import pytest

from rdmem.cli import main
from rdmem.store import KeyStore, open_store


@pytest.mark.parametrize("args", [["keys", "list"], ["keys", "revoke", "key_0123"], ["sessions", "list"],
                                  ["sessions", "show", "s"]])
def test_reading_or_changing_a_missing_store_creates_nothing(tmp_path, capsys, args):
    typo = tmp_path / "typo.db"
    assert main([*args, "--store", f"sqlite:///{typo}"]) == 2
    assert capsys.readouterr().err == f"rdmem: error: SQLite store {typo}: no such store file\n"
    assert not typo.exists() and list(tmp_path.iterdir()) == []


def test_keys_create_makes_the_store_and_list_reads_it(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    assert main(["keys", "create", "--tenant", "acme", "--store", url]) == 0
    assert main(["keys", "list", "--store", url]) == 0
    assert "acme" in capsys.readouterr().out
    with open_store(url) as store:
        assert [k.tenant for k in KeyStore(store).list_keys()] == ["acme"]


def test_an_in_memory_store_is_refused_where_it_would_be_lost_or_split(tmp_path, capsys, monkeypatch):
    """``serve --store memory:// --workers 2`` gave each worker sessions of its own (the same id to two messages,
    a delete half done); ``keys create`` into memory:// printed a secret for a store gone at exit (a review)."""
    served = []  # were it not refused, the test must not serve for ever
    monkeypatch.setattr("rdmem.server._workers.run_workers", lambda *a, **k: served.append(a))
    for spelling in ("memory://", "memory"):  # open_store takes both
        assert main(["serve", "--store", spelling, "--workers", "2", "--port", "0"]) == 2 and not served
        assert "--workers needs a store the processes share" in capsys.readouterr().err
        assert main(["keys", "create", "--tenant", "acme", "--store", spelling]) == 2
        out = capsys.readouterr()
        assert "would be gone when this command ends" in out.err and "rdmem_" not in out.out


def test_keys_list_shows_a_name_that_would_forge_a_line_escaped(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    assert main(["keys", "create", "--tenant", "acme", "--name", "evil\x1b[2J\nkey_fake  globex", "--store", url]) == 0
    capsys.readouterr()
    assert main(["keys", "list", "--store", url]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 2 and "\x1b" not in out and "evil\\x1b[2J\\nkey_fake" in out


def test_a_refused_public_serve_leaves_no_database_behind(tmp_path, capsys):
    db = tmp_path / "m.db"
    assert main(["serve", "--host", "0.0.0.0", "--store", f"sqlite:///{db}"]) == 2
    assert "no API keys in this store: refusing to serve 0.0.0.0 without them" in capsys.readouterr().err
    assert not db.exists() and list(tmp_path.iterdir()) == []
    # the default store in the data directory: the same
    assert main(["serve", "--host", "0.0.0.0", "--data-dir", str(tmp_path / "data")]) == 2
    assert not (tmp_path / "data" / "memory.db").exists()


def test_a_public_serve_with_keys_is_not_refused_by_the_check(tmp_path, capsys, monkeypatch):
    """The check reads the keys of an existing store (it does not mistake it for a missing one)."""
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with open_store(url) as store:
        KeyStore(store).create_key("acme")
    served = []
    monkeypatch.setattr("uvicorn.Server.run", lambda self, *a, **k: served.append(self.config.host))
    main(["serve", "--host", "0.0.0.0", "--store", url, "--port", "1"])
    assert served == ["0.0.0.0"] and "refusing" not in capsys.readouterr().err


def test_a_store_url_is_printed_without_its_password(capsys):
    assert main(["serve", "--store", "postgresql://rdmem:s3cr3t@127.0.0.1:1/agents"]) == 2
    err = capsys.readouterr().err
    assert "rdmem serve: store postgresql://rdmem:***@127.0.0.1:1/agents" in err
    assert "cannot connect to PostgreSQL at 127.0.0.1:1/agents" in err and "s3cr3t" not in err


@pytest.mark.parametrize("command", ["compact", "explain"])
def test_a_huge_budget_is_one_line_not_an_overflow(command, capsys):
    history = Path(__file__).resolve().parents[2] / "examples" / "history.json"
    assert main([command, str(history), "--budget", "99999999999999999999999"]) == 2
    assert capsys.readouterr().err == ("rdmem: error: budget must be at most 1,000,000,000,000,000 tokens, "
                                       "got 99,999,999,999,999,999,999,999\n")
