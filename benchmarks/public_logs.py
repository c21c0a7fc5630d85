"""Detection on public logs: what rlguard and two public RL-health tools flag on real runs.

Each case in ``tests/data/public_logs/cases.json`` is an excerpt of a public verl, TRL or
ms-swift training log whose outcome its source states (``SOURCES.md`` beside it quotes the
source): healthy, or failing in a named way at a named step. For each log:

- rlguard: ``rlguard import`` (the CLI's own code, in this process) into a real service on a
  throwaway SQLite file, then the backtest that ``rlguard detect`` runs
  (``POST /runs/{id}/detect``); no run config, as an import has none.
- the peers, when installed (``rlwatch`` and ``rldoctor`` from PyPI, both offline on CPU):
  the same records, as parsed by rlguard's importer, through each tool's own key map and
  detectors at their defaults (``benchmarks/_public_log_peers.py``).

A failing run counts as detected when a tool raises a WARN or CRITICAL alert on it; a healthy
run with such an alert is a false alarm. ``lead_steps`` is the step the source names minus
the first alert's step (positive: before the source's step). The JSON goes to stdout.
Run: ``python -m benchmarks.public_logs``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from benchmarks import _public_log_peers as peers
from benchmarks._support import service, sqlite_url
from rlguard import cli
from rlguard._transport import Transport
from rlguard.integrations.importers import READERS

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "public_logs"
ALARM_SEVERITIES = ("warn", "critical")
# Which detectors name the failure each case's source reports; a detection by another
# detector still counts as detected, and ``kind_matched`` says whether it was the right one.
MATCHING_DETECTORS: dict[str, dict[str, set[str]]] = {
    "rlguard": {
        "nan": {"nonfinite"},
        "collapse": {"entropy_collapse", "length", "no_learning_signal"},
        "no_learning": {"no_learning_signal"},
        "reward_hacking": {"length", "kl_runaway", "entropy_collapse"},
    },
    "rlwatch": {
        "nan": {"loss_nan"},
        "collapse": {"entropy_collapse"},
        "no_learning": {"advantage_variance"},
        "reward_hacking": {"reward_hacking", "kl_explosion"},
    },
    "rlwatch_verl_keys": {
        "nan": {"loss_nan"},
        "collapse": {"entropy_collapse"},
        "no_learning": {"advantage_variance"},
        "reward_hacking": {"reward_hacking", "kl_explosion"},
    },
    "rl_doctor": {
        "nan": {"gradient_pathology"},
        "collapse": {"entropy_collapse", "length_pathology", "advantage_collapse"},
        "no_learning": {"advantage_collapse", "gradient_pathology"},
        "reward_hacking": {"reward_hacking", "length_pathology", "reward_composition"},
    },
}


def load_cases(data: Path = DATA) -> list[dict[str, Any]]:
    """The cases manifest, each with the path of its log excerpt."""
    cases = json.loads((data / "cases.json").read_text(encoding="utf-8"))
    return [{**case, "path": data / case["file"]} for case in cases]


def read_records(case: Mapping[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """The log's steps as ``rlguard import`` reads them (the peers get the same records)."""
    reader = READERS[case["format"]]
    if case["format"] == "trl-console":
        return list(reader(case["path"], case.get("logging_steps", 1)))
    return list(reader(case["path"]))


def import_and_detect(url: str, case: Mapping[str, Any]) -> dict[str, Any]:
    """``rlguard import`` the log into the service, then its backtest; exit status and alerts."""
    run_id = "public-" + case["name"].replace(".", "-")
    argv = ["import", str(case["path"]), "--url", url, "--run-id", run_id]
    argv += ["--project", "public-logs", "--format", case["format"]]
    if case["format"] == "trl-console":
        argv += ["--logging-steps", str(case.get("logging_steps", 1))]
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        status = cli.main(argv)
    transport = Transport(url, timeout_s=120)
    try:  # the request ``rlguard detect RUN_ID`` sends
        result = transport.request("POST", f"/runs/{run_id}/detect", b'{"thresholds": {}}')
    finally:
        transport.close()
    alerts = [
        {
            "detector": alert["detector"],
            "severity": alert["severity"],
            "first_step": alert["first_step"],
            "last_step": alert["last_step"],
            "secondary": alert["secondary"],
            "message": alert["message"],
        }
        for alert in result["alerts"]
    ]
    return {
        "import_exit_status": status,
        "import_said": printed.getvalue().strip().splitlines()[-1:],
        "steps": result["steps"],
        "alerts": sorted(alerts, key=lambda a: (a["first_step"], a["detector"])),
    }


def score(tool: str, case: Mapping[str, Any], found: Mapping[str, Any]) -> dict[str, Any]:
    """Verdict for one tool on one log: true_positive, missed, false_alarm or quiet.

    The first alarm's step is the earliest alert's; for a post-hoc verdict without steps it
    is the step of the tool's first live finding, when it has a live mode that found one.
    """
    alarms = [a for a in found["alerts"] if a["severity"] in ALARM_SEVERITIES]
    steps = [a["first_step"] for a in alarms if a["first_step"] is not None]
    first = min(steps) if steps else found.get("first_live_finding_step")
    if case["expected"] == "healthy":
        return {"verdict": "false_alarm" if alarms else "quiet", "first_alarm_step": first}
    matching = MATCHING_DETECTORS[tool][case["expected"]]
    verdict: dict[str, Any] = {
        "verdict": "true_positive" if alarms else "missed",
        "kind_matched": any(a["detector"] in matching for a in alarms),
        "first_alarm_step": first,
        "lead_steps": None,
    }
    if first is not None and case["source_step"] is not None:
        verdict["lead_steps"] = case["source_step"] - first
    return verdict


def evaluate(url: str, case: Mapping[str, Any]) -> dict[str, Any]:
    """One log through rlguard and each installed peer, scored."""
    records = read_records(case)
    row: dict[str, Any] = {
        "log": case["name"],
        "source": case["source"],
        "expected": case["expected"],
        "source_step": case["source_step"],
        "steps_in_excerpt": len(records),
    }
    rlguard_run = import_and_detect(url, case)
    row["rlguard"] = {**rlguard_run, **score("rlguard", case, rlguard_run)}
    for tool, run_peer in peers.available().items():
        found = run_peer(case, records)
        row[tool] = {**found, **score(tool, case, found)}
    return row


def summarise(rows: list[dict[str, Any]], tool: str) -> dict[str, Any]:
    """Detected X of Y failing runs, false alarms on Z of W healthy runs, for one tool."""
    scored = [row for row in rows if tool in row]
    failing = [row for row in scored if row["expected"] != "healthy"]
    healthy = [row for row in scored if row["expected"] == "healthy"]
    leads = [row[tool]["lead_steps"] for row in failing if row[tool].get("lead_steps") is not None]
    return {
        "failing_runs": len(failing),
        "detected": sum(row[tool]["verdict"] == "true_positive" for row in failing),
        "detected_by_the_matching_detector": sum(
            bool(row[tool].get("kind_matched")) for row in failing
        ),
        "healthy_runs": len(healthy),
        "false_alarms": sum(row[tool]["verdict"] == "false_alarm" for row in healthy),
        "lead_steps": leads,
    }


@contextlib.contextmanager
def running_service() -> Iterator[str]:
    """A real ``rlguard server`` on a throwaway SQLite file; its base URL."""
    with (
        tempfile.TemporaryDirectory() as folder,
        service(sqlite_url(Path(folder), "public-logs.db")) as url,
    ):
        yield url


def run(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """Every case through every tool; the rows and one summary per tool."""
    with running_service() as url:
        rows = [evaluate(url, case) for case in cases]
    tools = ["rlguard", *peers.available()]
    return {
        "logs": rows,
        "summary": {tool: summarise(rows, tool) for tool in tools},
        "peers": peers.versions(),
    }


def main(argv: list[str] | None = None) -> int:
    """Print the evaluation as one JSON line (``--indent`` for people)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--indent", type=int, default=None)
    args = parser.parse_args(argv)
    result = run(load_cases())
    sys.stdout.write(json.dumps(result, indent=args.indent) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
