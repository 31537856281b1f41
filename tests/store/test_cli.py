"""``rdmem sessions list|show|export|delete``."""

from __future__ import annotations

import json

import pytest

from rdmem.cli import main
from rdmem.store import NewUnit, open_store


@pytest.fixture
def store_url(tmp_path):
    url = f"sqlite:///{tmp_path / 'mem.db'}"
    store = open_store(url)
    for s, n in (("alpha", 3), ("beta", 2)):
        store.append(s, [NewUnit({"role": "user", "content": f"{s} note {i}"}, 7, id=f"{s}{i}") for i in range(n)])
    store.set_tier("alpha", ["alpha0"], "archive")
    store.log_compaction("alpha", {"archived": ["alpha0"]})
    store.close()
    return url


def test_list(store_url, capsys):
    assert main(["sessions", "list", "--store", store_url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["session", "units", "working", "archived", "updated"]
    assert [line.split()[:4] for line in out[1:]] == [["alpha", "3", "2", "1"], ["beta", "2", "2", "0"]]
    assert main(["sessions", "list", "--store", store_url, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(d["session"], d["units"]) for d in data] == [("alpha", 3), ("beta", 2)]


def test_show(store_url, capsys):
    assert main(["sessions", "show", "alpha", "--store", store_url, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["working_ids"] == ["alpha1", "alpha2"]
    assert (data["units"], data["compactions"], data["tokens"]) == (3, 1, 21)
    assert main(["sessions", "show", "alpha", "--store", store_url]) == 0
    assert "working   alpha1 alpha2" in capsys.readouterr().out


def test_export_to_file_and_delete(store_url, tmp_path, capsys):
    out = tmp_path / "beta.jsonl"
    assert main(["sessions", "export", "beta", "--store", store_url, "-o", str(out)]) == 0
    assert [json.loads(line) for line in out.read_text().splitlines()] == [
        {"id": "beta0", "role": "user", "content": "beta note 0"},
        {"id": "beta1", "role": "user", "content": "beta note 1"},
    ]
    assert main(["sessions", "delete", "beta", "--store", store_url]) == 0
    assert "deleted session 'beta' (2 messages)" in capsys.readouterr().out
    assert main(["sessions", "list", "--store", store_url, "--json"]) == 0
    assert [d["session"] for d in json.loads(capsys.readouterr().out)] == ["alpha"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["sessions", "show", "nope"], "no session 'nope' in this store"),
        (["sessions", "export"], "'sessions export' needs a SESSION"),
        (["sessions", "list", "alpha"], "'sessions list' takes no SESSION"),
        (["sessions", "purge", "alpha"], "invalid choice: 'purge'"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(store_url, capsys, argv, message):
    assert main(argv + ["--store", store_url]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_bad_stores_exit_2_with_one_line(tmp_path, capsys):
    missing = tmp_path / "missing.db"
    assert main(["sessions", "list", "--store", f"sqlite:///{missing}"]) == 2
    assert f"{missing}: no such store file" in capsys.readouterr().err
    assert not missing.exists()
    junk = tmp_path / "junk.db"
    junk.write_text("not a database\n" * 100)
    assert main(["sessions", "list", "--store", f"sqlite:///{junk}"]) == 2
    err = capsys.readouterr().err
    assert f"SQLite store {junk}: not an SQLite database" in err and err.count("\n") == 1
    assert main(["sessions", "list", "--store", "redis://localhost"]) == 2
    assert "unknown store URL 'redis://localhost'" in capsys.readouterr().err
    assert main(["sessions", "list", "--store", "postgresql://u:hunter2@127.0.0.1:1/db"]) == 2
    err = capsys.readouterr().err
    assert "cannot connect to PostgreSQL at 127.0.0.1:1/db" in err and "hunter2" not in err
    assert err.count("\n") == 1
