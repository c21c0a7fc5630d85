"""The on-disk spool: batches the service could not take yet, one fsync'd file each.

Layout of ``<spool_dir>/<run_id>/``::

    run.json                         the run's create request, so `rlguard sync` can replay alone
    000001732870000123456789-p40-<batch_id>.batch   the body exactly as it will be POSTed (packed)
    000001732870000123456790-s64-<batch_id>.batch   a batch of 64 rollout samples
    final.json                       the status update finish() could not deliver
    dead-letter.jsonl                batches the service rejected (4xx), with the reason

File names sort oldest first. Files are written to a temporary name, fsync'd, renamed and the
directory fsync'd, so a crash leaves either a whole batch or none.
"""

from __future__ import annotations

import base64
import errno
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlguard import _packed, _samples, _wire
from rlguard.errors import SpoolError

BATCH_SUFFIX = ".batch"
_BATCH_NAME = re.compile(r"^(\d{24})-([ps])(\d+)-(.+)\.batch$")
POINTS, SAMPLES = "p", "s"  # the kinds of batch: metric points, rollout samples


@dataclass(frozen=True)
class SpooledBatch:
    """One batch file: its path, point (or sample) count, id and kind."""

    path: Path
    points: int
    batch_id: str
    kind: str = POINTS

    @property
    def size(self) -> int:
        """The batch file's size in bytes, 0 once it is gone."""
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # some platforms cannot open directories
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a crash leaves the old file or the new, never half."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk leaves no half-written file behind
        raise
    _fsync_dir(path.parent)


class Spool:
    """The spool directory of one run, with a byte budget over all its batch files."""

    def __init__(self, root: Path, run_id: str, budget_bytes: int) -> None:
        self.dir = Path(root) / run_id
        self.budget_bytes = budget_bytes
        self._sequence = 0
        self._size: int | None = None

    def __repr__(self) -> str:
        return f"Spool({str(self.dir)!r}, budget_bytes={self.budget_bytes})"

    def _ensure_dir(self) -> None:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SpoolError(f"cannot create spool directory {self.dir}: {exc}") from exc

    def size_bytes(self) -> int:
        """Bytes the run's spooled batches take, counted once then kept up to date."""
        if self._size is None:
            self._size = sum(batch.size for batch in self.pending())
        return self._size

    def fits(self, size: int) -> bool:
        """Whether a batch of ``size`` bytes fits the budget beside the spooled ones."""
        return self.size_bytes() + size <= self.budget_bytes

    def put(
        self, batch_id: str, points: int, body: bytes, kind: str = POINTS
    ) -> SpooledBatch | None:
        """Store one batch durably; None when the budget has no room for it."""
        if not self.fits(len(body)):
            return None
        self._ensure_dir()
        self._sequence += 1
        stamp = time.time_ns() * 1000 + self._sequence % 1000
        name = f"{stamp:024d}-{kind}{points}-{batch_id}{BATCH_SUFFIX}"
        try:
            write_atomic(self.dir / name, body)
        except OSError as exc:
            full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
            raise SpoolError(f"cannot write {self.dir / name}: {exc}", disk_full=full) from exc
        self._size = self.size_bytes() + len(body)
        return SpooledBatch(self.dir / name, points, batch_id, kind)

    def pending(self) -> list[SpooledBatch]:
        """Spooled batches, oldest first."""
        try:
            names = sorted(os.listdir(self.dir))
        except FileNotFoundError:
            return []
        batches = []
        for name in names:
            match = _BATCH_NAME.match(name)
            if match:
                batches.append(SpooledBatch(self.dir / name, int(match[3]), match[4], match[2]))
        return batches

    def read(self, batch: SpooledBatch) -> bytes | None:
        """A spooled batch's body, None when another process replayed it meanwhile."""
        try:
            return batch.path.read_bytes()
        except FileNotFoundError:  # another process (rlguard sync) replayed it meanwhile
            return None

    def remove(self, batch: SpooledBatch, size: int) -> None:
        """Delete a delivered batch and take its ``size`` off the budget."""
        try:
            batch.path.unlink()
        except FileNotFoundError:
            return
        if self._size is not None:
            self._size = max(0, self._size - size)

    def write_json(self, name: str, payload: dict[str, Any]) -> None:
        """Store a small JSON state file beside the batches, atomically."""
        self._ensure_dir()
        write_atomic(self.dir / name, json.dumps(payload).encode())

    def read_json(self, name: str) -> dict[str, Any] | None:
        """A JSON state file written by ``write_json``, None when there is none."""
        try:
            return json.loads((self.dir / name).read_text())
        except FileNotFoundError:
            return None

    def remove_json(self, name: str) -> None:
        """Delete a JSON state file, if present."""
        (self.dir / name).unlink(missing_ok=True)

    def dead_letter(self, body: bytes, reason: str) -> Path:
        """Append a rejected batch to ``dead-letter.jsonl`` (fsync'd) and return the file."""
        self._ensure_dir()
        path = self.dir / "dead-letter.jsonl"
        record = {"time": time.time(), "reason": reason, "body_gzip_b64": base64.b64encode(body)}
        line = json.dumps(record, default=bytes.decode) + "\n"
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
        return path


def spooled_run_ids(root: Path) -> list[str]:
    """Run ids with a spool directory under ``root`` that holds batches or a final status."""
    try:
        entries = sorted(Path(root).iterdir())
    except FileNotFoundError:
        return []
    return [
        entry.name
        for entry in entries
        if entry.is_dir()
        and (any(entry.glob("*" + BATCH_SUFFIX)) or (entry / "final.json").exists())
    ]


def kept_up_to(body: bytes, count: int, kind: str, step: int) -> tuple[bytes | None, int]:
    """A spooled batch of ``count`` points or samples without what comes after ``step``
    (None when nothing is left), and how many it keeps: a restart that resumes from ``step``
    logs the later ones again."""
    if kind == SAMPLES:
        kept_body, kept = _samples.samples_up_to(body, step)
    elif _packed.is_packed(body):
        kept_body, kept = _packed.steps_up_to(body, step)
    else:  # spooled by an earlier version of the hook
        kept_body, kept = _wire.steps_up_to(body, step)
    return (body, count) if kept == count else (kept_body, kept)
