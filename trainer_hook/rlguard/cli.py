"""The ``rlguard`` command: one table of subcommands, each implemented in its own module.

Subcommand modules are imported only when their command runs, so ``rlguard --help`` and the
hook itself stay free of server, torch and framework dependencies.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

# name -> (module defining ``add_arguments(parser)`` and ``run(args) -> int``, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "up": ("rlguard_compose.serve", "serve the API and the dashboard on one port"),
    "server": ("rlguard_backend.core.serve", "serve the API alone"),
    "dashboard": ("rlguard_compose.dashboard", "serve the dashboard alone against a remote API"),
    "db": ("rlguard_backend.core.serve", "database schema: upgrade, downgrade, current"),
    "token": ("rlguard_backend.core.token_cli", "API tokens: create, list, revoke"),
    "demo": ("rlguard.demo.cli", "run the tiny GRPO trainer and stream it into a service"),
    "sync": ("rlguard._cli_hook", "replay batches left in a spool directory"),
    "follow": ("rlguard._cli_hook", "follow a trainer's logs live (verl JSONL, TensorBoard dir)"),
    "import": ("rlguard._cli_hook", "import a finished run from logs"),
    "export": ("rlguard._cli_hook", "export a run's series as CSV"),
    "detect": ("rlguard._cli_hook", "re-run the detectors over a stored run"),
    "doctor": ("rlguard._doctor", "check the service, schema, clock, token and spool from here"),
    "mcp": ("rlguard_backend.mcp.cli", "serve the MCP tools over stdio for a coding agent"),
}


def _load(name: str) -> tuple[Callable[[argparse.ArgumentParser], None], Callable[..., int]]:
    module_name, _ = SUBCOMMANDS[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        extra = (
            "server"
            if module_name.startswith(("rlguard_backend", "rlguard_frontend", "rlguard_compose"))
            else ""
        )
        hint = f" (pip install 'rlguard[{extra}]')" if extra else ""
        raise SystemExit(f"rlguard {name}: cannot import {module_name}: {exc}{hint}") from exc
    return module.add_arguments, module.run


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    """The argument parser; only the chosen subcommand's module is imported for its options."""
    parser = argparse.ArgumentParser(prog="rlguard", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = next((arg for arg in argv if not arg.startswith("-")), None)
    for name, (_, help_text) in SUBCOMMANDS.items():
        sub = commands.add_parser(name, help=help_text)
        if name == chosen:
            add_arguments, _ = _load(name)
            add_arguments(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``rlguard`` command line; the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(args_list).parse_args(args_list)
    _, run = _load(args.command)
    return int(run(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
