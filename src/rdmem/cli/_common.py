"""What every subcommand shares: the one-line user error, reading messages, and writing files."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["CLIError", "read_messages", "positive_int", "whole_number", "positive_number", "write_text"]


T = TypeVar("T", int, float)


class CLIError(Exception):
    """A user error: printed as one line, exit code 2."""


#: A JSON value nested past what Python's parser reads (thousands of levels): one line, not a RecursionError.
_TOO_DEEP = "{}: the JSON nests too deeply to read (a message nests at most 64 levels)"


def positive_int(text: str) -> int:
    """An argparse type: a whole number of tokens > 0."""
    return whole_number("tokens")(text)


def whole_number(unit: str) -> Callable[[str], int]:
    """An argparse type: a whole number of ``unit`` > 0 (the error names the unit)."""
    return _positive(int, "a whole number", unit)


def positive_number(unit: str) -> Callable[[str], float]:
    """An argparse type: a finite number of ``unit`` > 0."""
    return _positive(float, "a number", unit)


def _positive(convert: Callable[[str], T], kind: str, unit: str) -> Callable[[str], T]:
    def parse(text: str) -> T:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {kind} of {unit}, got {text!r}") from None
        if not 0 < value < float("inf"):  # type: ignore[operator]
            raise argparse.ArgumentTypeError(f"must be > 0 {unit}, got {text}")
        return value

    return parse


_JSON_TYPES = {dict: "object", str: "string", int: "number", float: "number", bool: "boolean"}


def read_messages(path: str) -> list[dict[str, Any]]:
    """Messages from a JSON list, a JSONL file or an object with a ``messages`` list (``-`` for stdin); errors name
    the file and line."""
    if path == "-":
        text, name = sys.stdin.read(), "<stdin>"
    else:
        p = Path(path)
        if p.is_dir():
            raise CLIError(f"{path}: is a directory, not a file of messages")
        if not p.is_file():
            raise CLIError(f"{path}: no such file")
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CLIError(f"{path}: cannot read ({exc})") from None
        name = path
    stripped = text.strip()
    if not stripped:
        return []
    if stripped.startswith("["):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise CLIError(f"{name}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
        except RecursionError:
            raise CLIError(_TOO_DEEP.format(name)) from None
    else:
        try:
            whole = json.loads(stripped)
        except json.JSONDecodeError:
            whole = None
        except RecursionError:
            raise CLIError(_TOO_DEEP.format(name)) from None
        # An object whose "messages" is a list is a chat request's body (or this command's own output): its
        # messages. Any other JSON value that is not a message (an object without a role, a string, a number)
        # is neither a list nor JSONL of messages; a single message on one line is one-line JSONL.
        if isinstance(whole, dict) and isinstance(whole.get("messages"), list):
            return _objects(name, whole["messages"])
        if whole is not None and not (isinstance(whole, dict) and "role" in whole and "\n" not in stripped):
            raise CLIError(
                f"{name}: expected a JSON list of messages, JSONL (one message per line) or an object with a "
                f"\"messages\" list, got a JSON {_JSON_TYPES.get(type(whole), type(whole).__name__)}"
            )
        data = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                data.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise CLIError(f"{name}: line {lineno}: invalid JSON ({exc.msg})") from None
            except RecursionError:
                raise CLIError(_TOO_DEEP.format(f"{name}: line {lineno}")) from None
    if not isinstance(data, list):
        raise CLIError(f"{name}: expected a JSON list of messages, got a JSON {_JSON_TYPES.get(type(data), type(data).__name__)}")
    return _objects(name, data)


def _objects(name: str, data: list[Any]) -> list[dict[str, Any]]:
    for i, m in enumerate(data):
        if not isinstance(m, dict):
            raise CLIError(f"{name}: message {i} is not an object")
    return data




def write_text(path: str, text: str | Iterable[str]) -> None:
    """Write a file whole or not at all, or fail with one line naming it (a missing directory, no permission, a
    full disk, ...). A regular file (or a new one) is written beside itself (the link's target, for a symbolic
    link) and renamed over it once on disk, keeping its mode, so a kill or a full disk mid-way leaves it as it
    was (an export written in place was cut, losing the last one); anything else (``/dev/stdout``, a pipe) is
    written in place. ``text`` may come in pieces (an export, a page at a time)."""
    pieces = [text] if isinstance(text, str) else text
    try:
        if os.path.exists(path) and not os.path.isfile(path):  # a device, a pipe, /dev/stdout: in place
            with open(path, "w", encoding="utf-8") as fh:
                fh.writelines(pieces)
            return
        target = Path(os.path.realpath(path))
        part = target.with_name(f".{target.name}.{os.getpid()}.part")
        mode = target.stat().st_mode & 0o777 if target.exists() else None  # a new file: the umask's mode
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
            with os.fdopen(os.open(part, flags, 0o666 if mode is None else 0o600), "w", encoding="utf-8") as fh:
                fh.writelines(pieces)
                fh.flush()
                os.fsync(fh.fileno())
            if mode is not None:
                os.chmod(part, mode)
            os.replace(part, target)
        finally:
            part.unlink(missing_ok=True)
    except OSError as exc:
        raise CLIError(f"cannot write {path}: {exc.strerror or exc}") from None


def require_embeddings(policy: str | None, command: str) -> None:
    """A command that will embed needs the model: say so in one line at start, not on the first request.
    ``policy``: only if that policy embeds (``None``: always, as the service embeds every message for search)."""
    from ..embed import default_model_problem
    from ..sessions import needs_embedder

    try:
        needs = True if policy is None else needs_embedder(policy)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    problem = default_model_problem() if needs else None
    if problem is not None:
        why = "it embeds every message for search and recall" if policy is None else f"policy {policy!r} embeds"
        raise CLIError(f"{command} needs the embedding model ({why}); {problem}"
                       + ("" if policy is None else " (or --policy window)"))
