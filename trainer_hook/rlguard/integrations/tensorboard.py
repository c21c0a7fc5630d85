"""Follow a TensorBoard directory live: ``rlguard follow tensorboard DIR``.

OpenRLHF's ``TensorboardLogger`` (and any trainer's ``SummaryWriter``) writes scalars to event
files; this tails every ``events.out.tfevents.*`` under the directory into a run, as
``follow verl`` tails verl's JSONL. A file that appears later (a restarted trainer writes a new
one) is picked up; a record still being written is read once it is whole; scalars of a
subdirectory get its path as a prefix, as ``rlguard import`` names them. Needs ``tensorboard``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import rlguard


class TensorboardFollower:
    """Tails the event files under ``folder`` into ``run``, one reader per file."""

    def __init__(self, folder: Path, run: rlguard.Run) -> None:
        self.folder = Path(folder)
        self.run = run
        self.steps = 0
        self._loaders: dict[Path, Any] = {}

    def poll(self) -> int:
        """Log what the event files gained since the last poll; the number of steps logged."""
        logged = 0
        for path in sorted(self.folder.rglob("events.out.tfevents.*")):
            prefix = (
                "" if path.parent == self.folder else f"{path.parent.relative_to(self.folder)}/"
            )
            by_step = self._new_scalars(path, prefix)
            for step in sorted(by_step):
                self.run.log(by_step[step], step=step)
            logged += len(by_step)
        self.steps += logged
        return logged

    def _new_scalars(self, path: Path, prefix: str) -> dict[int, dict[str, float]]:
        from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
        from tensorboard.compat.proto import event_pb2

        loader = self._loaders.get(path)
        if loader is None:
            loader = self._loaders[path] = RawEventFileLoader(str(path))
        by_step: dict[int, dict[str, float]] = {}
        for raw in loader.Load():
            event = event_pb2.Event.FromString(raw)
            for value in event.summary.value:
                number = scalar_of(value)
                if number is not None:
                    by_step.setdefault(int(event.step), {})[prefix + value.tag] = number
        return by_step


def scalar_of(value: Any) -> float | None:
    """The number a summary value holds: a ``simple_value`` or a one-element tensor."""
    if value.HasField("simple_value"):
        return float(value.simple_value)
    if not value.HasField("tensor"):
        return None
    from tensorboard.util import tensor_util

    array = tensor_util.make_ndarray(value.tensor)
    if array.size != 1 or array.dtype.kind not in "fiu":
        return None
    return float(array.reshape(()))
