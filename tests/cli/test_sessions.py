"""``rdmem sessions list|show|export|delete``."""

from __future__ import annotations

import json
from pathlib import Path

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
    text = capsys.readouterr().out
    assert "working     alpha1 alpha2" in text
    assert "compactions 1\n" in text  # the same count as --json (feedback records are not compactions)


def test_the_session_may_come_after_the_options_as_the_usage_line_shows(store_url, capsys):
    """Found by the seventh review: the usage line's own order ("export --store URL NAME") was an
    "unrecognized arguments" error."""
    assert main(["sessions", "export", "--store", store_url, "beta"]) == 0
    assert [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()] == ["beta0", "beta1"]
    assert main(["sessions", "export", "--store", store_url, "beta", "more"]) == 2
    assert capsys.readouterr().err.strip() == "rdmem: error: unrecognized arguments: beta more"


def test_export_to_file_and_delete(store_url, tmp_path, capsys):
    out = tmp_path / "beta.jsonl"
    assert main(["sessions", "export", "beta", "--store", store_url, "-o", str(out)]) == 0
    assert [json.loads(line) for line in out.read_text().splitlines()] == [
        {"id": "beta0", "role": "user", "content": "beta note 0"},
        {"id": "beta1", "role": "user", "content": "beta note 1"},
    ]
    assert main(["sessions", "delete", "beta", "--store", store_url]) == 2  # not a terminal: --yes needed
    assert "pass --yes to confirm" in capsys.readouterr().err
    assert main(["sessions", "delete", "beta", "--store", store_url, "--yes"]) == 0
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
    # A password with '/' or '@' not percent-encoded: libpq took part of it for the host, and the error printed it
    for url in ("postgresql://bob:s3c/retpw@127.0.0.1:1/db", "postgresql://bob:s3c@retpw@127.0.0.1:1/db",
                "postgresql://bob:hunter2?x@127.0.0.1:1/db"):
        assert main(["sessions", "list", "--store", url]) == 2
        err = capsys.readouterr().err
        assert "percent-encode them" in err and not any(p in err for p in ("retpw", "s3c", "hunter2")), err
    # an '@' in a query parameter's value is the value's (Azure's user@server form): the URL is used
    for url in ("postgresql://127.0.0.1:1/db?user=myadmin@srv&sslmode=disable",
                "postgresql://127.0.0.1:1/db?application_name=worker@eu-1"):
        assert main(["sessions", "list", "--store", url]) == 2
        assert "cannot connect to PostgreSQL at 127.0.0.1:1/db" in capsys.readouterr().err


def test_an_export_that_fails_mid_way_leaves_the_last_one_whole(store_url, tmp_path, capsys, monkeypatch):
    """The export was written in place: a kill or a full disk mid-way cut the previous export (the tenth review)."""
    import errno
    import os

    out = tmp_path / "alpha.jsonl"
    assert main(["sessions", "export", "alpha", "--store", store_url, "-o", str(out)]) == 0
    before = out.read_bytes()

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    assert main(["sessions", "export", "beta", "--store", store_url, "-o", str(out)]) == 2
    assert f"cannot write {out}: No space left on device" in capsys.readouterr().err
    assert out.read_bytes() == before  # the last export, whole
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")] == []  # nothing left beside it


def test_an_export_keeps_a_links_target_and_a_files_mode_and_writes_to_a_device_in_place(store_url, tmp_path):
    """Written beside and renamed over, an export replaced a symbolic link by a file, made a 0600 export
    readable by everyone (0644), and could not write to /dev/stdout (the review of the day's diff)."""
    import os

    real, link = tmp_path / "real.jsonl", tmp_path / "link.jsonl"
    real.write_text("old\n")
    real.chmod(0o600)
    link.symlink_to(real)
    assert main(["sessions", "export", "alpha", "--store", store_url, "-o", str(link)]) == 0
    assert link.is_symlink() and real.read_text().startswith('{"id": "alpha0"')
    assert real.stat().st_mode & 0o777 == 0o600
    import subprocess
    import sys

    piped = subprocess.run([sys.executable, "-m", "rdmem.cli", "sessions", "export", "alpha", "--store", store_url,
                            "-o", "/dev/stdout"], capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0 and piped.stdout.startswith('{"id": "alpha0"'), piped.stderr
    assert os.path.islink("/dev/stdout")


def test_export_to_a_missing_directory_is_one_line(store_url, tmp_path, capsys):
    target = tmp_path / "no" / "such" / "dir" / "x.jsonl"
    assert main(["sessions", "export", "alpha", "--store", store_url, "-o", str(target)]) == 2
    err = capsys.readouterr().err
    assert f"cannot write {target}: No such file or directory" in err and err.count("\n") == 1


def test_a_corrupt_store_is_one_line_for_every_reading_command(tmp_path, capsys):
    import sqlite3

    from rdmem.store import NewUnit

    path = tmp_path / "m.db"
    with open_store(f"sqlite:///{path}") as store:
        store.append("s", [NewUnit({"role": "user", "content": f"note {i} " + "x" * 300}, 80) for i in range(200)])
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(path.read_bytes())
    data[len(data) // 2 // 4096 * 4096:][:4096] = b"\xff" * 4096
    data[len(data) // 2 // 4096 * 4096:len(data) // 2 // 4096 * 4096 + 4096] = b"\xff" * 4096
    path.write_bytes(bytes(data))
    for argv in (["sessions", "list"], ["sessions", "show", "s"], ["sessions", "export", "s"]):
        assert main(argv + ["--store", f"sqlite:///{path}"]) == 2
        err = capsys.readouterr().err
        assert f"SQLite store {path}: the file is damaged" in err and err.count("\n") == 1
    assert path.read_bytes() == bytes(data)


def test_reading_commands_work_in_a_read_only_directory(store_url, tmp_path):
    """As another user, in a directory they cannot write: list and export read the file, change nothing."""
    import os
    import subprocess
    import sys

    if os.geteuid() != 0:
        pytest.skip("needs root to run the check as an unprivileged user")
    import shutil
    import tempfile

    db = tmp_path / "mem.db"
    top = Path(tempfile.mkdtemp(prefix="rdmem-ro-", dir="/tmp"))  # pytest's tmp_path is root-only
    request_cleanup = lambda: shutil.rmtree(top, ignore_errors=True)  # noqa: E731
    ro = top / "ro"
    ro.mkdir()
    (ro / "mem.db").write_bytes(db.read_bytes())
    os.chmod(ro / "mem.db", 0o444)
    os.chmod(ro, 0o555)
    os.chmod(top, 0o755)
    code = (
        # Everything the commands import, imported first: the stdlib itself is not readable by that user.
        "import os, sys, json, datetime, sqlite3, urllib.parse, encodings.idna; "
        "import rdmem.cli, rdmem.store.sqlite, rdmem.cli.sessions; from rdmem.cli import main; "
        "os.setgid(65534); os.setuid(65534); "
        f"sys.exit(main(['sessions', 'list', '--store', 'sqlite:///{ro / 'mem.db'}']) or "
        f"main(['sessions', 'export', 'alpha', '--store', 'sqlite:///{ro / 'mem.db'}']))"
    )
    before = (ro / "mem.db").read_bytes()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    try:
        assert proc.returncode == 0, proc.stderr
        assert "alpha" in proc.stdout and "alpha note 1" in proc.stdout
        assert sorted(os.listdir(ro)) == ["mem.db"] and (ro / "mem.db").read_bytes() == before
    finally:
        request_cleanup()


def test_list_and_show_never_print_control_characters_raw(tmp_path, capsys):
    """A name stored by another program (or before the rule) prints escaped: no terminal escape reaches the tty."""
    url = f"sqlite:///{tmp_path / 'raw.db'}"
    with open_store(url) as store:
        for name in ("red\x1b[31mtext", "csi\x9b2J", "two\u2028lines"):
            store.append(name, [NewUnit({"role": "user", "content": "x"}, 3, id="m\x1b0")])
    assert main(["sessions", "list", "--store", url]) == 0
    out = capsys.readouterr().out
    assert "\\x1b[31mtext" in out and "csi\\x9b2J" in out and "two\\u2028lines" in out
    assert not any(c in out for c in "\x1b\x9b\u2028") and len(out.splitlines()) == 4
    assert main(["sessions", "show", "red\x1b[31mtext", "--store", url]) == 0
    shown = capsys.readouterr().out
    assert "session     red\\x1b[31mtext" in shown and "working     m\\x1b0" in shown and "\x1b" not in shown


def test_export_reads_a_page_at_a_time_and_writes_every_message_in_order(tmp_path, capsys, monkeypatch):
    """An export held the whole session, then the whole file, in memory (537 MB for 100,000 messages); it reads
    a page at a time now (BENCHMARKS: 195 -> 50 MB for 30,000), and ``show`` reads the working set and the totals."""
    from rdmem import MemoryManager
    from rdmem.cli import sessions

    monkeypatch.setattr(sessions, "_PAGE", 7)  # pages of 7: every page boundary crossed
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with MemoryManager(budget=200, policy="window", store=url, session="big", tokenizer=len) as mem:
        mem.extend([{"role": "user", "content": f"message {i}"} for i in range(50)])
        working = set(mem.stats()["working_ids"])
    out = tmp_path / "big.jsonl"
    assert main(["sessions", "export", "big", "--store", url, "-o", str(out)]) == 0
    assert "wrote 50 messages" in capsys.readouterr().err
    assert [json.loads(line)["content"] for line in out.read_text().splitlines()] == [f"message {i}" for i in range(50)]
    assert main(["sessions", "show", "big", "--store", url, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert set(shown["working_ids"]) == working and shown["units"] == 50
    assert shown["tokens"] == sum(len(f"message {i}") for i in range(50)) + 4 * 50


def test_an_export_during_which_a_message_is_deleted_says_so_not_a_copy_of_neither(tmp_path, monkeypatch):
    """A page at a time, a message deleted after the first page moved a later one into it: the export missed a
    message that was never deleted (a review). It now stops and says to export again."""
    from rdmem.cli import sessions
    from rdmem.cli._common import CLIError
    from rdmem.store import NewUnit, open_store

    monkeypatch.setattr(sessions, "_PAGE", 10)
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with open_store(url) as store, open_store(url) as service:
        store.append("s", [NewUnit({"role": "user", "content": f"msg {i}"}, 3, id=f"u{i}") for i in range(25)])
        lines = sessions.export_lines(store, "s")
        first = [next(lines) for _ in range(10)]
        service.delete("s", ["u5"])
        with pytest.raises(CLIError, match="were deleted during the export \\(10 written\\): export it again"):
            list(lines)
        assert len(first) == 10
        service.append("s", [NewUnit({"role": "user", "content": "late"}, 3, id="late")])  # an add is fine
        assert [json.loads(x)["id"] for x in sessions.export_lines(store, "s")][-1] == "late"
