"""``rlguard watch -- python train.py …``: run a command with every W&B run it starts teed.

The command replaces this process (``exec``): its exit status is ``watch``'s, and signals reach
it as if it had been started directly. ``PYTHONPATH`` gains the folder of a ``sitecustomize``
that attaches rlguard to W&B in each Python process the command starts (``wandb_site/``), so
children, ``torchrun`` workers and local Ray actors are watched too.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rlguard._config import load_config
from rlguard.errors import ConfigError

SITE_DIR = Path(__file__).resolve().parent / "integrations" / "wandb_site"
EXIT_USAGE = 2
EXIT_NOT_FOUND = 127  # as a shell answers a command it cannot find


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``rlguard watch``."""
    parser.add_argument("--url", default=None, help="service address (default RLGUARD_URL)")
    parser.add_argument("--token", default=None, help="API token (default RLGUARD_TOKEN)")
    parser.add_argument("--project", default=None, help="rlguard project (default: W&B's)")
    parser.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")


def watched_env(args: argparse.Namespace, environ: dict[str, str]) -> dict[str, str]:
    """The command's environment: the attaching folder first on PYTHONPATH, the options set."""
    env = dict(environ)
    path = [str(SITE_DIR), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(path))
    for name, value in (("URL", args.url), ("TOKEN", args.token), ("PROJECT", args.project)):
        if value:
            env[f"RLGUARD_{name}"] = value
    return env


def run(args: argparse.Namespace) -> int:
    """Check the settings, then become the command; returns only when it cannot start."""
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        sys.stderr.write("rlguard watch: name the command, e.g. rlguard watch -- python train.py\n")
        return EXIT_USAGE
    env = watched_env(args, dict(os.environ))
    try:
        load_config(env, run_id="watch-check")
    except ConfigError as exc:
        sys.stderr.write(f"rlguard watch: {exc}\n")
        return EXIT_USAGE
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        sys.stderr.write(f"rlguard watch: cannot run {argv[0]!r}: {exc.strerror or exc}\n")
        return EXIT_NOT_FOUND
    return 0  # not reached: exec does not return
