"""Follow a W&B run directory live: ``rlguard follow wandb DIR``.

Tails the run's ``run-<id>.wandb`` as W&B appends to it, with the rules ``rlguard import``
reads a finished one by (``wandb_files``): a record still being written is read once whole.
DIR may be a run directory or a ``wandb/`` directory, whose ``latest-run`` is looked up at each
poll: when it moves to a new run directory (W&B writes one for a resumed run), that file is read
from its start, into the same rlguard run when the W&B id is the same, else into a new one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import rlguard
from rlguard.integrations.wandb_files import (
    MAGIC,
    RecordReader,
    WandbFileError,
    WandbRun,
    check_header,
    decode,
    run_file,
    whole_records,
)


class WandbFollower:
    """Tails the W&B run under ``path`` into rlguard runs made by ``start_run``."""

    def __init__(self, path: Path, start_run: Callable[[WandbRun], rlguard.Run]) -> None:
        self.path = Path(path)
        self.start_run = start_run
        self.run: rlguard.Run | None = None
        self.steps = 0
        self._wandb_id: str | None = None
        self._summary: dict[str, Any] = {}
        self._source: Path | None = None
        self._pos = 0
        self._reader = RecordReader(self._log)

    def poll(self) -> int:
        """Log the rows the file gained since the last poll; how many."""
        try:
            source = run_file(self.path).resolve()
        except WandbFileError:
            return 0  # no run yet
        if source != self._source:
            self._source, self._pos, self._reader = source, 0, RecordReader(self._log)
        before = self.steps
        for raw in self._new_records(source):
            self._reader.add(decode(raw, source))
        return self.steps - before

    def _new_records(self, source: Path) -> list[bytes]:
        with open(source, "rb") as handle:
            if self._pos == 0:
                head = handle.read(len(MAGIC))
                if len(head) < len(MAGIC):
                    return []
                check_header(head, source)
                self._pos = len(MAGIC)
            handle.seek(self._pos)
            data = handle.read()
        records, self._pos = whole_records(data, self._pos, source)
        return records

    def _log(self, step: int, values: dict[str, Any]) -> None:
        wandb_run = self._reader.run
        assert wandb_run is not None  # rows come after the run record
        if self.run is None or wandb_run.id != self._wandb_id:
            self.finish()
            self.run, self._wandb_id = self.start_run(wandb_run), wandb_run.id
        self._summary = wandb_run.summary  # the reader keeps filling it
        self.run.log(values, step=step)
        self.steps += 1

    def finish(self) -> rlguard.RunStatus | None:
        """Finish the rlguard run being fed, with the W&B summary read so far."""
        run, self.run = self.run, None
        return None if run is None else run.finish(summary=self._summary)
