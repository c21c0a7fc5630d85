"""``rlguard stop RUN`` and ``rlguard checkpoint RUN``: ask a running trainer, from anywhere;
``rlguard detect --policy``: where a stop policy would have acted on a project's stored runs."""

from __future__ import annotations

import argparse
import json
import re
import urllib.parse
from typing import Any

from rlguard._api import run_path
from rlguard._cli_hook import _say, _token, _url
from rlguard._config import DEFAULT_URL
from rlguard._transport import Transport
from rlguard.errors import RejectedError, RetryableError

WHEN = "it reaches the trainer with its next batch, or within ~5 s when the trainer logs less often"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``rlguard stop | checkpoint``."""
    parser.add_argument("run_id", metavar="RUN", help="the run's id, name, or project/name")
    parser.add_argument("--reason", default=None, help="why, shown with the run's history")
    parser.add_argument("--url", default=None, help=f"service address (default {DEFAULT_URL})")
    parser.add_argument("--token", default=None, help="API token with write scope (RLGUARD_TOKEN)")


def run(args: argparse.Namespace) -> int:
    """Ask the run's trainer to stop or save a checkpoint; the exit status."""
    payload = {} if args.reason is None else {"reason": args.reason}
    where, project = run_path(args.run_id)
    query = f"?{urllib.parse.urlencode({'project': project})}" if project else ""
    path = f"{where}/{args.command}{query}"
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


POLICY = re.compile(
    r"^(?P<alert>[a-z0-9_]+(?:/[a-z0-9_]+)?)(?:@(?P<severity>info|warn|critical))?"
    r"(?::(?P<steps>\d+))?(?:=(?P<action>stop|checkpoint))?$"
)


def parse_policy(spec: str) -> dict[str, Any] | None:
    """``entropy_collapse@warn:20=stop`` as the REST body of a policy; None if unreadable."""
    match = POLICY.match(spec.strip())
    if match is None:
        return None
    body: dict[str, Any] = {"alert": match["alert"]}
    if match["severity"]:
        body["severity"] = match["severity"]
    if match["steps"]:
        body["persist_steps"] = int(match["steps"])
    if match["action"]:
        body["action"] = match["action"]
    return body


def backtest_policy(args: argparse.Namespace) -> int:
    """``rlguard detect --policy SPEC --project P``: one line per run it would have acted on."""
    policy = parse_policy(args.policy or "")
    if policy is None or not args.project:
        _say(
            "rlguard detect: give a run id, or --policy ALERT[@SEVERITY][:STEPS][=ACTION] with "
            "--project P, e.g. --policy entropy_collapse@warn:20 --project grpo-math"
        )
        return 2
    project = urllib.parse.quote(args.project, safe="")
    transport = Transport(_url(args), _token(args))
    try:
        body = json.dumps(policy).encode()
        result = transport.request("POST", f"/projects/{project}/policy-backtest", body)
    except (RetryableError, RejectedError) as exc:
        _say(f"rlguard detect --policy: {exc}")
        return 1
    finally:
        transport.close()
    action = policy.get("action", "stop")
    for hit in result["data"]:
        _say(
            f"{hit['run_id']}: {action} at step {hit['step']} of {hit['last_step']} "
            f"(alert {hit['alert_id']}), {hit['steps_saved']} step(s) saved"
        )
    _say(
        f"{result['count']} of {result['runs']} run(s) in {args.project!r} would {action}; "
        f"{result['steps_saved']} step(s) saved in all"
    )
    return 0
