"""``rlguard stop RUN`` and ``rlguard checkpoint RUN``: ask a running trainer, from anywhere."""

from __future__ import annotations

import argparse
import json
import urllib.parse

from rlguard._cli_hook import _say, _token, _url
from rlguard._config import DEFAULT_URL
from rlguard._transport import Transport
from rlguard.errors import RejectedError, RetryableError

WHEN = "it reaches the trainer with its next batch, or within ~5 s when the trainer logs less often"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``rlguard stop | checkpoint``."""
    parser.add_argument("run_id", help="the run's id")
    parser.add_argument("--reason", default=None, help="why, shown with the run's history")
    parser.add_argument("--url", default=None, help=f"service address (default {DEFAULT_URL})")
    parser.add_argument("--token", default=None, help="API token with write scope (RLGUARD_TOKEN)")


def run(args: argparse.Namespace) -> int:
    """Ask the run's trainer to stop or save a checkpoint; the exit status."""
    payload = {} if args.reason is None else {"reason": args.reason}
    path = f"/runs/{urllib.parse.quote(args.run_id, safe='')}/{args.command}"
    transport = Transport(_url(args), _token(args))
    try:
        command = transport.request("POST", path, json.dumps(payload).encode())
    except (RetryableError, RejectedError) as exc:
        _say(f"rlguard {args.command} {args.run_id}: {exc}")
        return 1
    finally:
        transport.close()
    _say(f"{args.command} asked for run {args.run_id} (command {command['id']}): {WHEN}")
    return 0
