"""The hook's CLI subcommands: ``rlguard sync | follow | import | export | detect``.

``rlguard.cli`` dispatches here; ``args.command`` tells which subcommand runs.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import sys
import threading
import urllib.parse
from pathlib import Path
from typing import Any

import rlguard
from rlguard._api import run_path
from rlguard._config import DEFAULT_URL, default_spool_dir
from rlguard._spool import Spool, spooled_run_ids
from rlguard._transport import Transport
from rlguard.errors import RejectedError, RetryableError, TransportError

IMPORT_FLUSH_EVERY_STEPS = 2000  # keeps the in-memory queue small on big files


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``rlguard sync | follow | import | export | detect``."""
    command = parser.prog.split()[-1]
    parser.add_argument("--url", default=None, help=f"service address (default {DEFAULT_URL})")
    parser.add_argument("--token", default=None, help="API token (default RLGUARD_TOKEN)")
    if command == "sync":
        parser.add_argument("run_ids", nargs="*", help="runs to replay (default: all spooled)")
        parser.add_argument("--spool-dir", default=None, help="default RLGUARD_SPOOL_DIR")
    elif command in ("follow", "import"):
        if command == "follow":
            parser.add_argument("framework", choices=["verl", "tensorboard", "wandb"])
        parser.add_argument("path", type=Path)
        parser.add_argument("--project", default=None)
        parser.add_argument("--run-id", default=None)
        parser.add_argument("--name", default=None)
    if command in ("follow", "import"):
        parser.add_argument(
            "--rollouts", type=Path, default=None, help="verl's trainer.rollout_data_dir"
        )
        parser.add_argument(
            "--validation", type=Path, default=None, help="verl's trainer.validation_data_dir"
        )
    if command == "follow":
        parser.add_argument(
            "--poll-s",
            type=float,
            default=0.5,
            help="seconds between looks for new lines or event files (default 0.5)",
        )
        parser.add_argument(
            "--exit-after-idle-s",
            type=float,
            default=None,
            help="finish the run after this many seconds with nothing new (default: follow "
            "until Ctrl-C)",
        )
    elif command == "import":
        from rlguard.integrations.importers import READERS

        parser.add_argument("--format", choices=["auto", *READERS], default="auto")
        parser.add_argument(
            "--logging-steps",
            type=int,
            default=1,
            help="TRL console logs without a progress bar: the steps between two logged dicts "
            "(a bar's step, where the log shows one, wins)",
        )
    elif command == "export":
        parser.add_argument("run_id", metavar="RUN", help="the run's id, name, or project/name")
    if command == "detect":
        parser.add_argument(
            "run_id", nargs="?", metavar="RUN", help="the run's id, name, or project/name"
        )
        parser.add_argument(
            "--policy",
            default=None,
            metavar="ALERT[@SEVERITY][:STEPS][=ACTION]",
            help="backtest a stop policy over a project's stored runs, e.g. "
            "entropy_collapse@warn:20 (needs --project)",
        )
        parser.add_argument("--project", default=None, help="the project --policy looks at")
        parser.add_argument(
            "--threshold",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="override a threshold, e.g. entropy_collapse.spent_ratio=0.4 (repeatable)",
        )
        parser.add_argument("--apply", action="store_true", help="replace the live alerts")
    if command == "export":
        parser.add_argument("-o", "--output", type=Path, default=None, help="default: stdout")
        parser.add_argument(
            "--format",
            choices=["csv", "parquet"],
            default="csv",
            help="parquet needs pandas and pyarrow, and --output",
        )
        parser.add_argument("--keys", default=None, help="comma-separated keys (default: all)")


def run(args: argparse.Namespace) -> int:
    """Run the chosen hook subcommand; the exit status."""
    commands = {
        "sync": sync,
        "follow": follow,
        "import": import_run,
        "export": export,
        "detect": detect,
    }
    return commands[args.command](args)


def _url(args: argparse.Namespace, fallback: str | None = None) -> str:
    return (args.url or os.environ.get("RLGUARD_URL") or fallback or DEFAULT_URL).rstrip("/")


def _token(args: argparse.Namespace) -> str | None:
    return args.token or os.environ.get("RLGUARD_TOKEN") or None


def _say(message: str) -> None:
    sys.stdout.write(message + "\n")


def sync(args: argparse.Namespace) -> int:
    """Replay spooled batches (oldest first) and final statuses left by trainers."""
    root = Path(args.spool_dir or os.environ.get("RLGUARD_SPOOL_DIR") or default_spool_dir())
    failed = 0
    for run_id in args.run_ids or spooled_run_ids(root):
        try:
            sent, rejected = _sync_run(Spool(root, run_id, budget_bytes=0), args)
        except TransportError as exc:
            _say(f"{run_id}: not synced ({exc}); the spool is kept")
            failed += 1
            continue
        _say(f"{run_id}: {sent} point(s) replayed" + (f", {rejected} rejected" if rejected else ""))
    return 1 if failed else 0


def _sync_run(spool: Spool, args: argparse.Namespace) -> tuple[int, int]:
    run_info = spool.read_json("run.json") or {"id": spool.dir.name, "project": "default"}
    transport = Transport(_url(args, run_info.pop("url", None)), _token(args))
    try:
        transport.create_run({**run_info, "resume_from_step": None})
        sent = rejected = 0
        for batch in spool.pending():
            body = spool.read(batch)
            if body is None:
                continue
            try:
                transport.post_kind(batch.kind, spool.dir.name, body)
                sent += batch.points
            except RejectedError as exc:
                spool.dead_letter(body, str(exc))
                rejected += batch.points
            spool.remove(batch, len(body))
        final = spool.read_json("final.json")
        if final is not None:
            transport.update_run(spool.dir.name, final)
            spool.remove_json("final.json")
        return sent, rejected
    finally:
        transport.close()


def _start_run(
    args: argparse.Namespace, default_name: str, config: dict[str, Any] | None = None
) -> rlguard.Run:
    return rlguard.init(
        project=args.project,
        run_id=args.run_id,
        name=args.name or default_name,
        config=config,
        url=_url(args),
        token=_token(args),
        gpu=False,
    )


def follow(args: argparse.Namespace) -> int:
    """Tail a verl JSONL file (and its rollout dumps) or a TensorBoard directory into a run
    until interrupted (or idle)."""
    from rlguard.integrations.verl import JsonlFollower, RolloutDirFollower, follow_all

    if args.framework == "wandb":
        return _follow_wandb(args)
    run = _start_run(args, args.path.stem)
    follower: Any = JsonlFollower(args.path, run)
    if args.framework == "tensorboard":
        from rlguard.integrations.tensorboard import TensorboardFollower

        follower = TensorboardFollower(args.path, run)
    followers: list[Any] = [follower]
    for folder, split in ((args.rollouts, "train"), (args.validation, "validation")):
        if folder is not None:
            followers.append(RolloutDirFollower(folder, run, split))
    _say(f"following {args.path} into run {run.id} at {run.url}")
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C ends following, then we finish
        follow_all(followers, threading.Event(), args.poll_s, args.exit_after_idle_s)
    status = run.finish()
    samples = status.samples_sent + status.samples_replayed
    _say(
        f"run {run.id}: {follower.steps} step(s), {status.sent + status.replayed} point(s) "
        f"and {samples} sample(s) sent"
    )
    return 0 if status.spool_batches == 0 else 1


def import_run(args: argparse.Namespace) -> int:
    """Import a finished run's logs through the same batch path as live logging."""
    from rlguard.integrations.importers import READERS, detect_format, read_verl_config

    if not args.path.exists():  # before a run is created for it
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(args.path))
    fmt = detect_format(args.path) if args.format == "auto" else args.format
    if fmt == "wandb":
        return _import_wandb(args)
    reader = READERS[fmt]
    records = reader(args.path, args.logging_steps) if fmt == "trl-console" else reader(args.path)
    config = read_verl_config(args.path) if fmt == "verl-console" else None
    run = _start_run(args, args.path.stem, config)
    progress = _Progress(args.path)
    steps = 0
    for step, values in records:
        run.log(values, step=step)
        steps += 1
        if steps % IMPORT_FLUSH_EVERY_STEPS == 0:
            run.flush()
            progress.show(steps)
    for folder, split in ((args.rollouts, "train"), (args.validation, "validation")):
        if folder is not None:
            _import_rollouts(folder, run, split)
    status = run.finish()
    progress.done(steps)
    _say(
        f"imported {steps} step(s), {status.logged - status.sample_signal_points} point(s) "
        f"and {status.samples_logged} "
        f"sample(s) as {fmt} into run {run.id}"
    )
    complete = _says_what_was_left(args.path, fmt, steps)
    return 0 if complete and status.spool_batches == 0 and status.dead_lettered == 0 else 1


def _import_wandb(args: argparse.Namespace) -> int:
    """A W&B run directory: read and checked whole first, then its name, config, tags,
    history, system metrics and summary into the run a live ``rlguard watch`` would have fed."""
    from rlguard.integrations.wandb_files import WandbFileError, read_run

    try:
        source = read_run(args.path)
    except WandbFileError as exc:
        _say(f"import failed, nothing imported: {exc}")
        return 2
    run = _start_wandb_run(args, source)
    for done, (step, values) in enumerate(sorted(source.steps.items()), start=1):
        run.log(values, step=step)
        if done % IMPORT_FLUSH_EVERY_STEPS == 0:
            run.flush()
    status = run.finish(summary=source.summary)
    _say(
        f"imported {len(source.steps)} step(s), {status.logged} point(s) of W&B run "
        f"{source.project}/{source.id} into run {run.id}"
    )
    return 0 if status.spool_batches == 0 and status.dead_lettered == 0 else 1


def _follow_wandb(args: argparse.Namespace) -> int:
    """Tail a W&B run directory (or ``wandb/``, following its latest run) until interrupted."""
    from rlguard.integrations.verl import follow_all
    from rlguard.integrations.wandb_files import WandbFileError
    from rlguard.integrations.wandb_follow import WandbFollower

    follower = WandbFollower(args.path, lambda source: _start_wandb_run(args, source))
    _say(f"following W&B runs under {args.path}")
    try:
        with contextlib.suppress(KeyboardInterrupt):
            follow_all([follower], threading.Event(), args.poll_s, args.exit_after_idle_s)
    except WandbFileError as exc:
        _say(f"follow stopped: {exc}")
        follower.finish()
        return 2
    status = follower.finish()
    sent = 0 if status is None else status.sent + status.replayed
    _say(f"{follower.steps} row(s), {sent} point(s) sent")
    return 0 if status is None or status.spool_batches == 0 else 1


def _start_wandb_run(args: argparse.Namespace, source: Any) -> rlguard.Run:
    """The rlguard run of a W&B run read from its files (``WandbRun``), as the live tee names it."""
    return rlguard.init(
        project=args.project or source.project,
        run_id=args.run_id or source.rlguard_id,
        name=args.name or source.name or source.id,
        config={**source.config, "wandb": {"id": source.id, "project": source.project}},
        tags=source.tags,
        url=_url(args),
        token=_token(args),
        gpu=False,
    )


def _says_what_was_left(path: Path, fmt: str, steps: int) -> bool:
    """False (with the fix) when no step, or not most of a text log's step lines, was imported."""
    from rlguard.integrations.importers import READERS, TEXT_FORMATS, count_step_lines

    if steps == 0:
        _say(
            f"warning: no step was read from {path} as {fmt}; "
            f"name its format with --format ({', '.join(READERS)})"
        )
        return False
    if fmt not in TEXT_FORMATS or path.is_dir():
        return True
    counts = count_step_lines(path)
    best = max(TEXT_FORMATS, key=lambda name: counts[name])
    if 2 * steps >= counts[best]:
        return True
    _say(
        f"warning: only {steps} step(s) were imported as {fmt}, but {counts[best]} lines of "
        f"{path} read as {best} steps; import it again with --format {best}"
    )
    return False


def _import_rollouts(folder: Path, run: rlguard.Run, split: str) -> None:
    """Every rollout dump in ``folder``, one step at a time (the queue stays small)."""
    from rlguard.integrations.verl import RolloutDirFollower

    follower = RolloutDirFollower(folder, run, split)
    for path, text in follower.pending():
        follower.log_file(path, text)
        run.flush()


class _Progress:
    """A one-line progress bar on stderr for files over a few megabytes."""

    MIN_BYTES = 4 * 1024 * 1024

    def __init__(self, path: Path) -> None:
        self.path = path
        self.enabled = path.is_file() and path.stat().st_size >= self.MIN_BYTES

    def show(self, steps: int) -> None:
        """Rewrite the progress line with the steps read so far (large files only)."""
        if self.enabled:
            sys.stderr.write(f"\rimporting {self.path.name}: {steps} steps")
            sys.stderr.flush()

    def done(self, steps: int) -> None:
        """End the progress line with the total."""
        if self.enabled:
            sys.stderr.write(f"\rimporting {self.path.name}: {steps} steps, done\n")


def export(args: argparse.Namespace) -> int:
    """Write a run's series as CSV (the service's export endpoint) or Parquet (the read API)."""
    if args.format == "parquet":
        return _export_parquet(args)
    transport = Transport(_url(args), _token(args))
    where, project = run_path(args.run_id)
    params = {"keys": args.keys, "project": project}
    query = urllib.parse.urlencode({k: v for k, v in params.items() if v})
    path = f"{where}/export" + (f"?{query}" if query else "")
    try:
        body = transport.raw("GET", path)
    except TransportError as exc:
        _say(f"export failed: {exc}")
        return 1
    finally:
        transport.close()
    if args.output is None:
        sys.stdout.write(body.decode())
    else:
        args.output.write_bytes(body)
    return 0


def _export_parquet(args: argparse.Namespace) -> int:
    if args.output is None:
        _say("--format parquet writes a binary file: give it --output run.parquet")
        return 2
    keys = [k for k in args.keys.split(",") if k] if args.keys else None
    try:
        with rlguard.Api(_url(args), _token(args)) as api:
            frame = api.history(args.run_id, keys)
        frame.to_parquet(args.output)
    except TransportError as exc:
        _say(f"export failed: {exc}")
        return 1
    except ImportError as exc:
        _say(f"export failed: {exc}; Parquet needs pandas and pyarrow (pip install pyarrow)")
        return 1
    _say(f"{args.run_id}: {len(frame)} step(s) x {frame.shape[1]} column(s) -> {args.output}")
    return 0


def detect(args: argparse.Namespace) -> int:
    """Re-run the detectors over a stored run and list the alerts, or backtest a policy."""
    if args.policy is not None or args.run_id is None:
        from rlguard._cli_commands import backtest_policy

        return backtest_policy(args)
    thresholds = {}
    for item in args.threshold:
        name, sep, value = item.partition("=")
        try:
            thresholds[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            _say(f"--threshold {item!r}: expected NAME=NUMBER, e.g. kl_runaway.level_warn=0.6")
            return 2
    body = json.dumps({"thresholds": thresholds, "apply": args.apply}).encode()
    transport = Transport(_url(args), _token(args))
    try:
        with rlguard.Api(_url(args), _token(args)) as api:  # a backtest is a write: by id
            run_id = api.run(args.run_id)["id"]
        answer: Any = transport.request("POST", f"{run_path(run_id)[0]}/detect", body)
    except (RetryableError, RejectedError) as exc:
        _say(f"detect failed: {exc}")
        return 1
    finally:
        transport.close()
    alerts = answer.get("data", answer.get("alerts", [])) if isinstance(answer, dict) else answer
    for alert in alerts or []:
        _say(
            f"[{alert.get('severity')}] {alert.get('detector')} steps "
            f"{alert.get('first_step')}-{alert.get('last_step')}: {alert.get('message')}"
        )
    if not alerts:
        _say(json.dumps(answer) if answer else "no alerts")
    return 0
