"""Load: real trainer processes streaming through the real hook into the service.

Each trainer (``benchmarks/_load_trainer.py``) logs KEYS metrics at STEPS_PER_S steps/s, sleeping
where a trainer would train. At each level the given number of trainers start at the same
second against a topology: one ``rlguard server`` process on a SQLite file (``sqlite``) or on a
throwaway PostgreSQL database (``postgres``), or two such processes behind nginx run from
``deploy/nginx.conf`` (``postgres_proxy``); they log for SECONDS and finish. Reported per level:
- ``points_per_s``: points stored per second of the level, beside ``offered_per_s``, what the
  trainers logged per second (the baseline of the same run);
- ``ingest_ms``: median and p99 of the hooks' batch posts that were stored;
- ``hooks_spooled`` (spooled during logging) and ``refused_posts`` (503 + Retry-After);
- ``read_ms`` under load beside ``read_idle_ms`` measured before the level (GET /series of one
  run of the level, and /health);
- the service's CPU (% of one core) and peak RSS, the trainers' CPU together (% of one core)
  and the whole machine's (% of all cores: the trainers share it with the service here);
  bytes of database per million points;
- ``lost`` and ``duplicated`` points (each key's stored count against the steps logged): the
  benchmark exits 1 when any point is lost, a trainer did not finish, or the service stopped
  answering (a hang).
``saturation`` names the first level whose ingest p99 passed 1 s or whose hooks had to spool.

With ``--baseline-tree PATH`` (a ``git worktree`` of another commit) the same levels also run
against that tree's service and hook, each tree on its own database, alternating which goes
first at each level and round; ``compared`` gives this tree's figures over the baseline's
(medians over ``--rounds``).

    python -m benchmarks.load [--levels 8,16,32,64,128,256] [--seconds 60]
                              [--topologies sqlite,postgres,postgres_proxy]
                              [--samples-per-step 0] [--baseline-tree PATH] [--rounds 1]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from benchmarks._load_meters import ProcessMeter, Reader
from benchmarks._support import (
    Nginx,
    postgres_database,
    service_process,
    sqlite_url,
    summary_ms,
    tree_env,
)

KEYS = 100
STEPS_PER_S = 10.0
P99_LIMIT_S = 1.0
START_ALLOWANCE_S = 0.02  # per trainer: time to spawn it before the common start second
TRAINER_ALLOWANCE_S = 420.0  # beyond its seconds of logging: start, finish(300 s), exit


def run_level(
    url: str,
    pids: list[int],
    trainers: int,
    seconds: float,
    folder: Path,
    samples: int = 0,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Start ``trainers`` trainer processes at once, wait for them, check and report."""
    run_ids = [f"load-{trainers}-{i}-{uuid.uuid4().hex[:6]}" for i in range(trainers)]
    idle = Reader(url, run_ids[0])
    with httpx.Client(timeout=30) as http:
        for _ in range(10):
            idle.read_once(http)
    start_at = time.time() + 1.0 + START_ALLOWANCE_S * trainers
    with ProcessMeter(pids) as meter, Reader(url, run_ids[0]) as reader:
        procs = [
            _spawn(url, run_id, start_at, seconds, folder, samples, env or {}) for run_id in run_ids
        ]
        deadline = time.monotonic() + seconds + TRAINER_ALLOWANCE_S
        reports = [_collect(proc, deadline) for proc in procs]
        elapsed = time.time() - start_at
    counts = _stored_counts(url, run_ids)
    level = _level_report(trainers, seconds, elapsed, reports, counts, meter, reader, idle)
    stuck = [r for r, report in zip(run_ids, reports, strict=True) if report is None]
    if stuck:  # what the first one printed (its stacks, when faulthandler fired)
        level["unfinished_stderr"] = (folder / f"{stuck[0]}.stderr").read_text()[-4000:]
    return level


def _spawn(
    url: str,
    run_id: str,
    start_at: float,
    seconds: float,
    folder: Path,
    samples: int,
    env: dict[str, str],
) -> Any:
    args = [url, run_id, f"{start_at:.3f}", str(seconds), str(STEPS_PER_S), str(KEYS)]
    args += [str(folder / "spool"), str(samples)]
    with open(folder / f"{run_id}.stderr", "w") as stderr:  # a stuck trainer's stacks go here
        return subprocess.Popen(
            [sys.executable, "-m", "benchmarks._load_trainer", *args],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**os.environ, **env},
        )


def _collect(proc: Any, deadline: float) -> dict[str, Any] | None:
    """The trainer's report, or None when it failed or outlived the level's one deadline."""
    try:
        out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None
    lines = out.strip().splitlines()
    return json.loads(lines[-1]) if proc.returncode == 0 and lines else None


def _stored_counts(url: str, run_ids: list[str]) -> dict[str, list[int]]:
    counts: dict[str, list[int]] = {}
    with httpx.Client(timeout=60) as http:
        for run_id in run_ids:
            answer = http.get(f"{url}/api/v1/runs/{run_id}/keys")
            data = answer.json()["data"] if answer.status_code == 200 else []
            counts[run_id] = [k["count"] for k in data if k["name"].startswith("load/")]
    return counts


def _level_report(
    trainers: int,
    seconds: float,
    elapsed: float,
    reports: list[dict[str, Any] | None],
    counts: dict[str, list[int]],
    meter: ProcessMeter,
    reader: Reader,
    idle: Reader,
) -> dict[str, Any]:
    done = [r for r in reports if r is not None]
    expected = sum(r["steps"] * r["keys"] for r in done)
    stored = sum(sum(counts[r["run_id"]]) for r in done)
    lost = sum(_missing(r["steps"], r["keys"], counts[r["run_id"]]) for r in done)
    duplicated = sum(max(0, c - r["steps"]) for r in done for c in counts[r["run_id"]])
    posts = [s for r in done for s in r["posts_ok_s"]]
    ingest = summary_ms(posts) if posts else {"median_ms": 0.0, "p99_ms": 0.0, "n": 0}
    return {
        "trainers": trainers,
        "finished": len(done),
        "offered_per_s": round(expected / seconds),
        "points_per_s": round(stored / max(elapsed, seconds)),
        "stored": stored,
        "lost": lost if len(done) == trainers else -1,
        "duplicated": duplicated,
        "ingest_ms": ingest,
        "hooks_spooled": sum(1 for r in done if r["spooled_before_finish"]),
        "refused_posts": sum(r["posts_refused"] for r in done),
        "dropped": sum(r["dropped"] + r["dead_lettered"] for r in done),
        "read_ms": summary_ms(reader.samples) if reader.samples else None,
        "read_idle_ms": summary_ms(idle.samples) if idle.samples else None,
        "read_failures": reader.failures,
        "read_failure_kinds": dict(reader.failure_kinds),
        "service_cpu_percent": round(meter.cpu_percent, 1),
        "trainers_cpu_percent": round(meter.trainers_cpu_percent, 1),
        "machine_cpu_percent": round(meter.machine_cpu_percent, 1),
        "service_peak_rss_mb": round(meter.peak_rss / 2**20, 1),
        "elapsed_s": round(elapsed, 1),
    }


def _missing(steps: int, keys: int, counts: list[int]) -> int:
    """Points of one run not stored: each key should hold every step once."""
    return sum(max(0, steps - c) for c in counts) + (keys - len(counts)) * steps


def database_bytes(database_url: str) -> int:
    """Bytes the database holds on disk (the SQLite file, or PostgreSQL's database size)."""
    if database_url.startswith("sqlite"):  # the file alone: the WAL is reused scratch space
        return Path(database_url.split(":///", 1)[1]).stat().st_size
    import psycopg

    dsn = database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn) as connection:
        row = connection.execute("SELECT pg_database_size(current_database())").fetchone()
    return int(row[0]) if row else 0


def run_topology(
    kind: str,
    levels: list[int],
    seconds: float,
    folder: Path,
    replicas: int = 1,
    samples: int = 0,
    trees: dict[str, Path | None] | None = None,
    rounds: int = 1,
) -> dict[str, Any]:
    """``replicas`` backend processes per tree (behind nginx when more than one), each tree on
    its own ``kind`` database; the trees take turns at each level, the first one alternating."""
    trees = trees or {"this": None}
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    with contextlib.ExitStack() as stack:
        served = {}
        for name, tree in trees.items():
            work = folder / f"{kind}-{replicas}-{name}"
            work.mkdir()
            url = stack.enter_context(database(kind, work))
            address, pids = stack.enter_context(serving(url, replicas, work, tree_env(tree)))
            served[name] = Served(url, address, pids, work, tree_env(tree))
        turn = 0
        for trainers in levels:
            for _ in range(rounds):
                order = list(trees)[:: -1 if turn % 2 else 1]
                turn += 1
                for name in order:
                    results[name].append(_measured_level(served[name], trainers, seconds, samples))
    this, *others = trees
    out: dict[str, Any] = _topology_result(replicas, results[this])
    for name in others:
        out[name] = _topology_result(replicas, results[name])
        out[name]["compared"] = compare(results[this], results[name])
    return out


@dataclasses.dataclass
class Served:
    """One tree's service during a topology: its database, address, processes and folder."""

    database_url: str
    url: str
    pids: list[int]
    folder: Path
    env: dict[str, str]
    stored: int = 0  # points stored in its database so far, over all levels


def _measured_level(served: Served, trainers: int, seconds: float, samples: int) -> dict[str, Any]:
    level = run_level(
        served.url, served.pids, trainers, seconds, served.folder, samples, served.env
    )
    served.stored += level["stored"]
    level["db_bytes_per_million_points"] = round(
        database_bytes(served.database_url) / max(served.stored, 1) * 1e6
    )
    url = served.url
    level["answers_after"] = _answers(url)
    print(json.dumps({"level": level}), file=sys.stderr, flush=True)
    return level


def _topology_result(replicas: int, levels: list[dict[str, Any]]) -> dict[str, Any]:
    return {"replicas": replicas, "levels": levels, "saturation": saturation(levels)}


def compare(this: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per level: the medians over its rounds of this tree's figures and the baseline's, and
    their ratio (this / baseline: below 1 is faster for latencies, above 1 for points/s)."""
    figures = {
        "points_per_s": lambda lv: lv["points_per_s"],
        "ingest_p50_ms": lambda lv: lv["ingest_ms"]["median_ms"],
        "ingest_p99_ms": lambda lv: lv["ingest_ms"]["p99_ms"],
        "read_p50_ms": lambda lv: (lv["read_ms"] or {}).get("median_ms", 0.0),
        "service_peak_rss_mb": lambda lv: lv["service_peak_rss_mb"],
    }
    rows = []
    for trainers in dict.fromkeys(lv["trainers"] for lv in this):
        row: dict[str, Any] = {"trainers": trainers}
        for name, figure in figures.items():
            mine = statistics.median(figure(lv) for lv in this if lv["trainers"] == trainers)
            theirs = statistics.median(figure(lv) for lv in baseline if lv["trainers"] == trainers)
            row[name] = {
                "this": mine,
                "baseline": theirs,
                "ratio": round(mine / theirs, 3) if theirs else None,
            }
        rows.append(row)
    return rows


@contextlib.contextmanager
def serving(
    database_url: str, replicas: int, folder: Path, env: dict[str, str] | None = None
) -> Iterator[tuple[str, list[int]]]:
    """The service's address and process ids: one backend, or several behind nginx."""
    extra = tuple((env or {}).items())
    with contextlib.ExitStack() as stack:
        backends = [
            stack.enter_context(service_process(database_url, *extra)) for _ in range(replicas)
        ]
        if replicas == 1:
            yield backends[0][0], [backends[0][1]]
            return
        ports = [int(url.rsplit(":", 1)[1]) for url, _ in backends]
        proxy = Nginx(folder, ports).start()
        stack.callback(proxy.stop)
        yield proxy.url, [pid for _, pid in backends]


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/v1/health", timeout=30).status_code == 200
    except httpx.HTTPError:
        return False


def saturation(levels: list[dict[str, Any]]) -> int | None:
    """The first level whose ingest p99 passed 1 s or whose hooks had to spool."""
    for level in levels:
        if level["ingest_ms"]["p99_ms"] > P99_LIMIT_S * 1000 or level["hooks_spooled"]:
            return int(level["trainers"])
    return None


def healthy(result: dict[str, Any]) -> bool:
    """Nothing lost or duplicated, every trainer finished, the service answered throughout
    (for the baseline tree's run too, when there is one)."""
    baseline = result.get("baseline")
    if baseline is not None and not healthy(baseline):
        return False
    return all(
        level["lost"] == 0
        and level["duplicated"] == 0
        and level["finished"] == level["trainers"]
        and level["answers_after"]
        for level in result["levels"]
    )


# topology -> (database, backend processes); more than one sit behind nginx (deploy/nginx.conf)
TOPOLOGIES = {
    "sqlite": ("sqlite", 1),
    "postgres": ("postgres", 1),
    "postgres_proxy": ("postgres", 2),
}


@contextlib.contextmanager
def database(kind: str, folder: Path) -> Iterator[str]:
    """A database URL of ``kind`` (sqlite or postgres), thrown away afterwards."""
    if kind == "sqlite":
        yield sqlite_url(folder, "load.db")
        return
    with postgres_database() as url:
        yield url


def main() -> int:
    """Run the load levels on every topology and print JSON; 1 on a lost or duplicated point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--levels", default="8,16,32,64,128,256")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument(
        "--topologies", default="sqlite,postgres", help=f"of {', '.join(TOPOLOGIES)}"
    )
    parser.add_argument(
        "--samples-per-step", type=int, default=0, help="rollout samples (~1 kB) per step"
    )
    parser.add_argument(
        "--baseline-tree", type=Path, help="a checkout of another commit to run alongside"
    )
    parser.add_argument("--rounds", type=int, default=1, help="runs of each level per tree")
    args = parser.parse_args()
    trees: dict[str, Path | None] = {"this": None}
    if args.baseline_tree is not None:
        trees["baseline"] = args.baseline_tree
    levels = [int(n) for n in args.levels.split(",")]
    out: dict[str, Any] = {
        "config": {
            "keys": KEYS,
            "steps_per_s": STEPS_PER_S,
            "seconds": args.seconds,
            "samples_per_step": args.samples_per_step,
            "baseline_tree": str(args.baseline_tree) if args.baseline_tree else None,
            "rounds": args.rounds,
        },
        "cpus": os.cpu_count(),
    }
    with tempfile.TemporaryDirectory() as folder:
        for name in args.topologies.split(","):
            kind, replicas = TOPOLOGIES[name]
            out[name] = run_topology(
                kind,
                levels,
                args.seconds,
                Path(folder),
                replicas,
                args.samples_per_step,
                trees,
                args.rounds,
            )
    print(json.dumps(out))
    ok = all(healthy(out[name]) for name in args.topologies.split(","))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
