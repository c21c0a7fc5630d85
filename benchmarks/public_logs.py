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

Per detector (``per_detector``), for each tool: *hits* are the failing runs of a kind the
detector answers to (``MATCHING_DETECTORS``) on which it raised WARN or CRITICAL, *misses* those
on which it did not, *false alarms* the healthy runs on which it did, *other failures* the
failing runs of another kind on which it did, and *lead* the named step minus its first WARN on
each hit. Every figure is given for all cases and for the out-of-sample ones (``in_sample`` in
``cases.json``: false for the logs nobody read when the thresholds were written).
Run: ``python -m benchmarks.public_logs`` (``--markdown`` prints the tables
``docs/detectors.md`` publishes instead of the JSON).
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
from rlguard_backend.stability import DETECTOR_TYPES

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
        "in_sample": case["in_sample"],
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


def _alarming(found: Mapping[str, Any], detector: str) -> list[dict[str, Any]]:
    return [
        a
        for a in found["alerts"]
        if a["detector"] == detector and a["severity"] in ALARM_SEVERITIES
    ]


def detector_names(rows: list[dict[str, Any]], tool: str) -> list[str]:
    """The detectors to report for a tool: rlguard's all (in the order they run); a peer's
    those its failure kinds name and any that alarmed on a case."""
    if tool == "rlguard":
        return [kind.id for kind in DETECTOR_TYPES]
    named = {d for detectors in MATCHING_DETECTORS[tool].values() for d in detectors}
    alarmed = {
        a["detector"]
        for row in rows
        if tool in row
        for a in row[tool]["alerts"]
        if a["severity"] in ALARM_SEVERITIES
    }
    return sorted(named | alarmed)


def detector_figures(rows: list[dict[str, Any]], tool: str, detector: str) -> dict[str, Any]:
    """Hits, misses, false alarms, alarms on other failures and lead steps of one detector."""
    kinds = sorted(k for k, ds in MATCHING_DETECTORS[tool].items() if detector in ds)
    figures: dict[str, Any] = {
        "answers_to": kinds,
        "hits": [],
        "misses": [],
        "false_alarms": [],
        "other_failures": [],
        "lead_steps": [],
    }
    for row in rows:
        if tool not in row:
            continue
        alarms = _alarming(row[tool], detector)
        if row["expected"] == "healthy":
            outcome = "false_alarms" if alarms else None
        elif row["expected"] in kinds:
            outcome = "hits" if alarms else "misses"
        else:
            outcome = "other_failures" if alarms else None
        if outcome is not None:
            figures[outcome].append(row["log"])
        steps = [a["first_step"] for a in alarms if a["first_step"] is not None]
        if outcome == "hits" and steps and row["source_step"] is not None:
            figures["lead_steps"].append(row["source_step"] - min(steps))
    return figures


def per_detector(rows: list[dict[str, Any]], tool: str) -> dict[str, dict[str, Any]]:
    """``detector_figures`` for each of a tool's detectors, on all cases and out of sample."""
    out_of_sample = [row for row in rows if not row["in_sample"]]
    return {
        detector: {
            "all": detector_figures(rows, tool, detector),
            "out_of_sample": detector_figures(out_of_sample, tool, detector),
        }
        for detector in detector_names(rows, tool)
    }


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
    out_of_sample = [row for row in rows if not row["in_sample"]]
    return {
        "logs": rows,
        "summary": {tool: summarise(rows, tool) for tool in tools},
        "summary_out_of_sample": {tool: summarise(out_of_sample, tool) for tool in tools},
        "per_detector": {tool: per_detector(rows, tool) for tool in tools},
        "peers": peers.versions(),
    }


TOOL_NAMES = {
    "rlguard": "rlguard",
    "rlwatch": "rlwatch",
    "rlwatch_verl_keys": "rlwatch (verl keys)",
    "rl_doctor": "rl-doctor",
}
VERDICT_WORDS = {
    "true_positive": "detected",
    "missed": "missed",
    "false_alarm": "false alarm",
    "quiet": "quiet",
}


def _count(figures: Mapping[str, Any], key: str) -> str:
    """``n (m)``: on all cases, and out of sample."""
    return f"{len(figures['all'][key])} ({len(figures['out_of_sample'][key])})"


def _steps(values: list[int]) -> str:
    return ", ".join(str(v).replace("-", "−") for v in values) if values else "—"


def detector_table(result: Mapping[str, Any], tool: str) -> str:
    """One tool's per-detector calibration table (Markdown)."""
    lines = [
        "| detector | answers to | hits | misses | false alarms | other failures | lead (steps) |",
        "|---|---|---|---|---|---|---|",
    ]
    for detector, figures in result["per_detector"][tool].items():
        kinds = figures["all"]["answers_to"]
        if kinds:
            hits, misses = _count(figures, "hits"), _count(figures, "misses")
        else:
            hits = misses = "—"
        lines.append(
            f"| `{detector}` | {', '.join(kinds) or '—'} | {hits} | {misses} "
            f"| {_count(figures, 'false_alarms')} | {_count(figures, 'other_failures')} "
            f"| {_steps(figures['all']['lead_steps'])} |"
        )
    return "\n".join(lines)


def case_table(result: Mapping[str, Any]) -> str:
    """Each case's outcome for each tool, and the totals (Markdown)."""
    tools = list(result["summary"])
    header = "| log (steps) | sample | outcome (named step) | " + " | ".join(
        TOOL_NAMES[t] for t in tools
    )
    lines = [header + " |", "|---|---|---|" + "---|" * len(tools)]
    for row in result["logs"]:
        cells = []
        for tool in tools:
            found = row[tool]
            alarming = sorted(
                {a["detector"] for a in found["alerts"] if a["severity"] in ALARM_SEVERITIES}
            )
            cell = VERDICT_WORDS[found["verdict"]]
            if found["first_alarm_step"] is not None:
                cell += f" at {found['first_alarm_step']}"
            if alarming:
                cell += ": " + ", ".join(f"`{d}`" for d in alarming)
            cells.append(cell)
        named = "" if row["source_step"] is None else f" ({row['source_step']})"
        sample = "in" if row["in_sample"] else "out"
        lines.append(
            f"| {row['log']} ({row['steps_in_excerpt']}) | {sample} "
            f"| {row['expected']}{named} | " + " | ".join(cells) + " |"
        )
    for label, key in (("all", "summary"), ("out of sample", "summary_out_of_sample")):
        totals = []
        for tool in tools:
            s = result[key][tool]
            totals.append(
                f"{s['detected']} of {s['failing_runs']} / {s['false_alarms']} of "
                f"{s['healthy_runs']}"
            )
        lines.append(f"| **detected / false alarms, {label}** | | | " + " | ".join(totals) + " |")
    return "\n".join(lines)


def markdown(result: Mapping[str, Any]) -> str:
    """The tables ``docs/detectors.md`` publishes: per detector for each tool, then per case."""
    versions = ", ".join(f"{name} {v}" for name, v in result["peers"].items() if v)
    parts = [f"<!-- python -m benchmarks.public_logs --markdown; peers: {versions or 'none'} -->"]
    for tool in result["per_detector"]:
        parts += [f"**{TOOL_NAMES[tool]}**", detector_table(result, tool)]
    parts += ["**Per case**", case_table(result)]
    return "\n\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print the evaluation as one JSON line (``--indent`` for people)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--indent", type=int, default=None)
    parser.add_argument("--markdown", action="store_true", help="print the docs' tables")
    args = parser.parse_args(argv)
    result = run(load_cases())
    if args.markdown:
        sys.stdout.write(markdown(result))
    else:
        sys.stdout.write(json.dumps(result, indent=args.indent) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
