"""Command line: ``rdmem compact|policies|explain|eval|sessions|train``.

Thin: parse arguments, call the library, format. Bad input exits with code 2
and one line on stderr naming the problem.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

__all__ = ["main", "CLIError", "read_messages"]


class CLIError(Exception):
    """A user error: printed as one line, exit code 2."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number of tokens, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0 tokens, got {value}")
    return value


_JSON_TYPES = {dict: "object", str: "string", int: "number", float: "number", bool: "boolean"}


def read_messages(path: str) -> list[dict[str, Any]]:
    """Messages from a JSON list or JSONL file (``-`` for stdin); errors name the file and line."""
    if path == "-":
        text, name = sys.stdin.read(), "<stdin>"
    else:
        p = Path(path)
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
    else:
        try:
            whole = json.loads(stripped)
        except json.JSONDecodeError:
            whole = None
        # One JSON value that is not a message (an object without a role, a string, a number) is
        # neither a list nor JSONL of messages; a single message on one line is one-line JSONL.
        if whole is not None and not (isinstance(whole, dict) and "role" in whole and "\n" not in stripped):
            raise CLIError(
                f"{name}: expected a JSON list of messages or JSONL (one message per line), "
                f"got a JSON {_JSON_TYPES.get(type(whole), type(whole).__name__)}"
            )
        data = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                data.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise CLIError(f"{name}: line {lineno}: invalid JSON ({exc.msg})") from None
    if not isinstance(data, list):
        raise CLIError(f"{name}: expected a JSON list of messages, got a JSON {_JSON_TYPES.get(type(data), type(data).__name__)}")
    for i, m in enumerate(data):
        if not isinstance(m, dict):
            raise CLIError(f"{name}: message {i} is not an object")
    return data


def _cmd_compact(args: argparse.Namespace) -> int:
    from .compaction import compact

    messages = read_messages(args.file)
    result = compact(
        messages, budget=args.budget, policy=args.policy, query=args.query, tokenizer=args.tokenizer
    )
    json.dump(
        {"messages": result.messages, "tokens": result.tokens, "kept_ids": result.kept_ids,
         "report": [d.to_dict() for d in result.report], "warnings": result.warnings},
        sys.stdout, ensure_ascii=False, indent=None if args.compact_json else 2,
    )
    sys.stdout.write("\n")
    return 0


def _cmd_explain(args: argparse.Namespace) -> int:
    from .compaction import compact

    result = compact(read_messages(args.file), budget=args.budget, policy=args.policy, query=args.query,
                     tokenizer=args.tokenizer)
    print(result.explain())
    return 0


def _cmd_policies(args: argparse.Namespace) -> int:
    from .policies import POLICIES, get_policy

    width = max(len(n) for n in POLICIES)
    for name in sorted(POLICIES):
        print(f"{name:<{width}}  {get_policy(name).description}")
    return 0


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="JSON list or JSONL of chat messages; '-' for stdin")
    p.add_argument("--budget", type=_positive_int, required=True, help="token budget (per-message overhead included)")
    p.add_argument("--policy", default="rd", help="policy name (see 'rdmem policies'); default rd")
    p.add_argument("--query", default=None, help="the next question, for query-aware selection")
    p.add_argument("--tokenizer", default="cl100k_base", help="tiktoken encoding, tokenizer.json path; default cl100k_base")


#: Extra subcommands: name -> (register(subparsers) function). Modules add theirs here.
SUBCOMMANDS: dict[str, Callable[[Any], None]] = {}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rdmem", description="Rate-distortion memory compaction for LLM agents.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("compact", help="fit a chat history to a token budget (JSON out)")
    _add_common(p)
    p.add_argument("--compact-json", action="store_true", help="print JSON on one line")
    p.set_defaults(func=_cmd_compact)

    p = sub.add_parser("explain", help="why each message was kept, compressed or archived")
    _add_common(p)
    p.set_defaults(func=_cmd_explain)

    p = sub.add_parser("policies", help="list the policies")
    p.set_defaults(func=_cmd_policies)

    _load_extensions()
    for register in SUBCOMMANDS.values():
        register(sub)
    return parser


def _load_extensions() -> None:
    """Import the modules that register subcommands (eval, sessions, train)."""
    import importlib

    for mod in ("rdmem.eval.cli", "rdmem.store.cli", "rdmem.learn.cli"):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name != mod and not mod.startswith(str(exc.name)):
                raise


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2
        raise CLIError(message)


def main(argv: Sequence[str] | None = None) -> int:
    from .store import StoreError

    parser = build_parser()
    parser.__class__ = _Parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for p in action.choices.values():
                p.__class__ = _Parser
    try:
        args = parser.parse_args(argv)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return int(args.func(args) or 0)
    except CLIError as exc:
        print(f"rdmem: error: {exc}", file=sys.stderr)
        return 2
    except (ValueError, TypeError) as exc:
        print(f"rdmem: error: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:  # unreachable database, corrupt or newer store file
        print(f"rdmem: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
