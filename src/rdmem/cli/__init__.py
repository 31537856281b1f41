"""Command line: ``rdmem compact|explain|policies|sessions|serve|keys|mcp|eval|train``.

Thin: parse arguments, call the library, format. Bad input exits with code 2
and one line on stderr naming the problem; warnings go to stderr. Each
subcommand lives in its own module and registers its parser; the list below
is the whole of it (modules import nothing from here). A warning (the
library's, or a result's) is one line, ``rdmem: warning: ...``.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from typing import Any, NoReturn

from . import compact as _compact_cmd
from . import eval as _eval_cmd
from . import mcp as _mcp_cmd
from . import serve as _serve_cmd
from . import sessions as _sessions_cmd
from . import train as _train_cmd
from ._common import CLIError, read_messages

__all__ = ["main", "build_parser", "CLIError", "read_messages"]

#: Every subcommand module, in the order ``rdmem --help`` lists them.
COMMANDS = (_compact_cmd, _sessions_cmd, _serve_cmd, _mcp_cmd, _eval_cmd, _train_cmd)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2
        raise CLIError(message)


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = _Parser(prog="rdmem", description="Rate-distortion memory compaction for LLM agents.")
    parser.add_argument("--version", action="version", version=f"rdmem {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module in COMMANDS:
        module.register(sub)
    return parser


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    """A warning as one line on stderr (``rdmem: warning: ...``), not Python's two with the source line."""
    text = str(message).removeprefix("rdmem: ")
    print(f"rdmem: warning: {text}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    with warnings.catch_warnings():  # the caller's own handler comes back when the command ends
        warnings.showwarning = _show_warning
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    from ..store import StoreError

    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        # argparse reads a command's positionals in one run: "sessions export --store URL NAME" left NAME over
        # (the usage line's own order). A session named after the options is the session.
        if extra and getattr(args, "session", "") is None and len(extra) == 1 and not extra[0].startswith("-"):
            args.session, extra = extra[0], []
        if extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        if args.command is None:
            parser.print_help(sys.stderr)
            return 2
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
