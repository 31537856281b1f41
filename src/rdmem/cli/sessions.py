"""``rdmem sessions list|show|export|delete --store URL [SESSION]``: look into a store from the shell.

Thin: parse, call the store, format. Reading commands open an SQLite file
read-only (they work in a read-only directory and never change the file).
``export`` writes the session's messages as given (every field, with their
``id``) as JSONL; adding them back in order with
:meth:`rdmem.MemoryManager.extend` gives the same messages.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime, timezone
from collections.abc import Iterator
from typing import Any

from ..names import printable
from ..store import Store, open_store
from ._common import CLIError, write_text

__all__ = ["register", "export_lines"]

_ACTIONS = ("list", "show", "export", "delete")


#: Messages read at once by an export (its memory is a page's, not the session's: 100,000 messages took 537 MB).
_PAGE = 1000


def export_lines(store: Store, session: str) -> Iterator[str]:
    """The session's messages as JSON lines (the message as given, with its ``id``), in order, read a page at a
    time. A message deleted while it is read (it moves later ones into a page already read) is an error, not a
    copy of neither state: export it again (``-o``: the file is left as it was); messages added meanwhile are
    in it or not, after the others."""
    offset, version = 0, store.version(session)
    while page := store.load(session, offset=offset, limit=_PAGE):
        if offset and store.changes(session, version, rows=1).full:  # "full": deleted since (places moved)
            raise CLIError(f"messages of session {session!r} were deleted during the export ({offset} written): "
                           "export it again")
        yield from (json.dumps({"id": u.id, **u.message}, ensure_ascii=False) for u in page)
        offset += len(page)


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _open(url: str, *, readonly: bool) -> Store:
    return open_store(url, readonly=readonly, create=False)  # no command here may create an empty store


def _confirm(session: str, units: int, yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise CLIError(f"'sessions delete' deletes {units} messages for good; pass --yes to confirm")
    answer = input(f"delete session {session!r} and its {units} messages for good? [y/N] ")
    if answer.strip().lower() not in ("y", "yes"):
        raise CLIError("not deleted")


def _cmd_sessions(args: argparse.Namespace) -> int:
    if not args.store:
        raise CLIError("--store is required (or set RDMEM_STORE), e.g. --store sqlite:///memory.db")
    if args.action == "list" and args.session is not None:
        raise CLIError("'sessions list' takes no SESSION")
    if args.action != "list" and args.session is None:
        raise CLIError(f"'sessions {args.action}' needs a SESSION (see 'rdmem sessions list --store URL')")
    store = _open(args.store, readonly=args.action != "delete")
    try:
        infos = {i.session: i for i in store.sessions()}
        if args.action == "list":
            _list(infos, as_json=args.json)
            return 0
        info = infos.get(args.session)
        if info is None:
            raise CLIError(f"no session {args.session!r} in this store (see 'rdmem sessions list')")
        if args.action == "show":
            _show(store, info, as_json=args.json)
        elif args.action == "export":
            count = [0]

            def lines() -> Iterator[str]:
                for line in export_lines(store, args.session):
                    count[0] += 1
                    yield line + "\n"

            if args.output:
                write_text(args.output, lines())
                print(f"wrote {count[0]} messages to {args.output}", file=sys.stderr)
            else:
                sys.stdout.writelines(lines())
        else:
            _confirm(args.session, info.units, args.yes)
            store.delete_session(args.session)
            print(f"deleted session {args.session!r} ({info.units} messages)")
        return 0
    finally:
        store.close()


def _info_dict(info: Any) -> dict[str, Any]:
    return {
        "session": info.session,
        "units": info.units,
        "working": info.working,
        "archived": info.archived,
        "created": _when(info.created),
        "updated": _when(info.updated),
    }


def _list(infos: dict[str, Any], *, as_json: bool) -> None:
    if as_json:
        json.dump([_info_dict(i) for i in infos.values()], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    shown = {s: printable(s) for s in infos}  # a name with control characters prints escaped, on one line
    width = max([len(s) for s in shown.values()] + [7])
    print(f"{'session':<{width}}  {'units':>7}  {'working':>7}  {'archived':>8}  updated")
    for i in infos.values():
        print(f"{shown[i.session]:<{width}}  {i.units:>7}  {i.working:>7}  {i.archived:>8}  {_when(i.updated)}")


def _show(store: Store, info: Any, *, as_json: bool) -> None:
    read = store.changes(info.session, rows=1)  # the working units and the totals, not the whole session
    log = store.compaction_log(info.session)
    state = read.state
    working = [u for u in read.units if u.tier == "working"]
    data = dict(
        _info_dict(info),
        tokens=read.size[1],
        working_tokens=sum(u.tokens for u in working),
        compactions=sum(1 for r in log if "archived" in r),  # the log also keeps value-model feedback
        settings=state.get("settings"),
        working_ids=[u.id for u in working],
    )
    if as_json:
        json.dump(data, sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
        return
    print(f"session     {printable(info.session)}")
    print(f"units       {info.units} ({data['tokens']} tokens): {info.working} working "
          f"({data['working_tokens']} tokens), {info.archived} archived")
    print(f"created     {data['created']}")
    print(f"updated     {data['updated']}")
    print(f"compactions {data['compactions']}")
    if data["settings"]:
        print("settings    " + printable(" ".join(f"{k}={v}" for k, v in data["settings"].items())))
    print("working     " + printable(" ".join(data["working_ids"])))


def register(sub: Any) -> None:
    p = sub.add_parser(
        "sessions",
        help="list, show, export (JSONL) or delete the sessions of a store",
        description="rdmem sessions list|show|export|delete --store URL [SESSION]",
    )
    p.add_argument("action", choices=_ACTIONS, help="what to do")
    p.add_argument("session", nargs="?", default=None, help="the session (not for 'list')")
    p.add_argument(
        "--store",
        default=os.environ.get("RDMEM_STORE"),
        help="store URL: sqlite:///path.db or postgresql://... (default: $RDMEM_STORE)",
    )
    p.add_argument("--json", action="store_true", help="list/show: print JSON")
    p.add_argument("--output", "-o", default=None, help="export: write to this file instead of stdout")
    p.add_argument("--yes", "-y", action="store_true", help="delete: do not ask for confirmation")
    p.set_defaults(func=_cmd_sessions)
