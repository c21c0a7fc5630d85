"""``rlguard demo``: train the presets and stream them into an rlguard service."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from rlguard.demo.presets import ALL, PRESETS, resolve
from rlguard.demo.trainer import LogFn, SamplesFn, TrainResult

DEFAULT_URL = "http://127.0.0.1:8000"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's command-line options."""
    parser.add_argument("--preset", default="all", choices=[*PRESETS, "all"])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto", help="cpu, cuda, or auto (CUDA when present)")
    parser.add_argument("--url", default=os.environ.get("RLGUARD_URL", DEFAULT_URL))
    parser.add_argument("--project", default="demo")
    parser.add_argument("--no-log", action="store_true", help="train without streaming")
    parser.add_argument("--serve", action="store_true", help="start the service and stream into it")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)


@dataclass(frozen=True)
class HookLoggerFactory:
    """Opens one rlguard run per preset inside the training process (picklable for spawn)."""

    url: str
    project: str
    steps: int

    def __call__(self, preset: str, seed: int) -> tuple[LogFn, Callable[[str], None], SamplesFn]:
        """A run for one preset and seed, and the log, finish and samples functions that feed it."""
        import rlguard

        config = resolve(preset).run_config(planned_steps=self.steps)
        run = rlguard.init(
            project=self.project,
            name=f"{preset}-seed{seed}",
            run_id=None,
            config={**config, "seed": seed},
            tags=["demo", preset],
            url=self.url,
            gpu=True,
        )

        def log(metrics: dict[str, float], step: int) -> None:
            run.log(metrics, step=step)

        def finish(status: str) -> None:
            run.finish(status=status)

        return log, finish, run.log_samples


def run(args: argparse.Namespace) -> int:
    """Train the chosen preset(s); stream unless ``--no-log``; keep serving after ``--serve``."""
    from rlguard.demo.parallel import train_one, train_parallel

    presets = list(ALL) if args.preset == "all" else [args.preset]
    url = _start_service(args.host, args.port) if args.serve else args.url
    factory = None if args.no_log else HookLoggerFactory(url, args.project, args.steps)
    if factory is not None:
        print(f"rlguard demo: streaming {', '.join(presets)} into {url} (project {args.project!r})")
    if len(presets) == 1:
        results = {
            presets[0]: train_one(presets[0], args.steps, args.seed, args.device, factory, 0)
        }
    else:
        results = train_parallel(presets, args.steps, args.seed, args.device, factory)
    for result in results.values():
        print(_summary(result))
    if args.serve:
        _serve_until_interrupted(url)
    return 0


def _start_service(host: str, port: int) -> str:
    """API and dashboard on one port in this process (SQLite at ./.rlguard unless configured)."""
    try:
        serve = importlib.import_module("rlguard_compose.serve")
    except ImportError as exc:
        raise SystemExit(f"rlguard demo --serve needs the server extra: {exc}") from exc
    try:
        server = serve.start_background(host, port)
    except OSError as exc:
        raise SystemExit(
            f"rlguard demo: cannot listen on {host}:{port} ({exc}); "
            "pick another port with --port (make demo PORT=8001)"
        ) from exc
    print(f"rlguard demo: open {server.url}/ (dashboard; API at {server.url}/api)", flush=True)
    return str(server.url)


def _serve_until_interrupted(url: str) -> None:
    print(f"rlguard demo: training done; the dashboard stays at {url} — Ctrl-C to stop")
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()


def _summary(result: TrainResult) -> str:
    first, last = result.history[0], result.history[-1]
    return (
        f"{result.preset:>15}: {len(result.history)} steps in {result.seconds:.1f} s | "
        f"score {first['critic/score/mean']:.2f} -> {last['critic/score/mean']:.2f} | "
        f"entropy {first['actor/entropy']:.2f} -> {last['actor/entropy']:.2f} | "
        f"KL to ref {last['probe/kl_to_ref']:.3f}"
    )
