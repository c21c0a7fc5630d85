"""Live stability monitor for RL fine-tuning of language models: KL, clip and entropy, watched
while the run trains.

Start the service and dashboard with `rlguard up` and call `rlguard.init()` in the trainer; or
follow a trainer's logs, import a finished run, and replay the detectors over a stored one.
An error ends a command with one line saying what was wrong and what to do; ``--debug``
shows the traceback instead.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import sys
from collections.abc import Callable, Sequence

# One table of subcommands, each implemented in its own module. A module is imported only when
# its command runs, so `rlguard --help` and the hook itself stay free of server, torch and
# framework dependencies.
# name -> (module defining ``add_arguments(parser)`` and ``run(args) -> int``, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "up": ("rlguard_compose.serve", "serve the API and the dashboard on one port"),
    "server": ("rlguard_backend.core.serve", "serve the API alone"),
    "dashboard": ("rlguard_compose.dashboard", "serve the dashboard alone against a remote API"),
    "db": ("rlguard_backend.core.serve", "database schema: upgrade, downgrade, current"),
    "token": ("rlguard_backend.core.token_cli", "API tokens: create, list, revoke"),
    "demo": ("rlguard.demo.cli", "run the tiny GRPO trainer and stream it into a service"),
    "watch": ("rlguard._watch", "run a command with every W&B run it starts watched"),
    "sync": ("rlguard._cli_hook", "replay batches left in a spool directory"),
    "follow": ("rlguard._cli_hook", "follow a trainer's logs live (verl, TensorBoard, W&B)"),
    "import": ("rlguard._cli_hook", "import a finished run from logs"),
    "export": ("rlguard._cli_hook", "export a run's series as CSV"),
    "detect": ("rlguard._cli_hook", "re-run the detectors over a stored run"),
    "stop": ("rlguard._cli_commands", "ask a running trainer to stop"),
    "checkpoint": ("rlguard._cli_commands", "ask a running trainer to save a checkpoint"),
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
    parser = argparse.ArgumentParser(prog="rlguard", description=__doc__)
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = next((arg for arg in argv if not arg.startswith("-")), None)
    for name, (_, help_text) in SUBCOMMANDS.items():
        sub = commands.add_parser(name, help=help_text)
        if name == chosen:
            add_arguments, _ = _load(name)
            add_arguments(sub)
            sub.add_argument("--debug", action="store_true", help=DEBUG_HELP, default=False)
    return parser


DEBUG_HELP = "on an error, show Python's traceback instead of one line"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``rlguard`` command line; the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(args_list).parse_args(args_list)
    _, run = _load(args.command)
    try:
        return int(run(args) or 0)
    except Exception as exc:
        if args.debug or "--debug" in args_list:
            raise
        sys.stderr.write(f"rlguard {args.command}: {explain(exc, args)}\n")
        return 1


def explain(exc: Exception, args: argparse.Namespace) -> str:
    """One line for a person: what was wrong, and what to do about it."""
    rerun = "(rlguard --debug … shows the traceback)"
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        where = f"port {args.port}" if getattr(args, "port", None) is not None else "the address"
        return (
            f"{where} is already in use by another process: stop that process, or choose "
            "another port with --port"
        )
    if isinstance(exc, FileNotFoundError) and exc.filename is not None:
        return f"no such file or directory: {exc.filename}; check the path and try again"
    if isinstance(exc, PermissionError) and exc.filename is not None:
        return f"permission denied: {exc.filename}; check its owner and mode"
    if isinstance(exc, OSError) and exc.strerror:
        about = f": {exc.filename}" if exc.filename is not None else ""
        return f"{exc.strerror}{about} {rerun}"
    return f"{exc} {rerun}" if str(exc) else f"{type(exc).__name__} {rerun}"


if __name__ == "__main__":
    raise SystemExit(main())
