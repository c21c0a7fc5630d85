"""Read a W&B run directory after the fact: ``rlguard import wandb/latest-run``.

W&B writes each run's records (run, config, history, summary, system stats, metric
definitions) to ``run-<id>.wandb``, a LevelDB-style log: a 7-byte header (``:W&B``, magic
0xBEE1, version 0), then 32 KiB blocks of chunks, each with a CRC-32, a length and a type
(whole, first, middle, last). W&B 0.31 no longer ships a Python reader of this file (its
``datastore`` module is gone), so the framing is read here and each record is decoded with the
wandb package's own protobuf classes (``wandb.proto.wandb_internal_pb2.Record``). Tested with
wandb 0.31.0, which writes version 0 of the log.
"""

from __future__ import annotations

import dataclasses
import json
import re
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rlguard.integrations.wandb import StepAxes, rlguard_run_id

MAGIC = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
BLOCK_BYTES = 32 * 1024
CHUNK_HEADER = struct.Struct("<IHB")  # crc32, length, type
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
GIB = 1024**3
# W&B's system metric names -> the keys rlguard's own sampler writes (rlguard/_gpu.py)
GPU_KEYS = {
    "gpu": ("utilization", 1.0),
    "memoryAllocatedBytes": ("memory_used_gb", 1 / GIB),
    "powerWatts": ("power_w", 1.0),
    "temp": ("temperature_c", 1.0),
    "smClock": ("sm_clock_mhz", 1.0),
}
HOST_KEYS = {
    "memory_percent": ("system/memory_percent", 1.0),
    "proc.memory.rssMB": ("system/process_rss_gb", 1 / 1024),
}
GPU_STAT = re.compile(r"^gpu\.(\d+)\.(\w+)$")


class WandbFileError(ValueError):
    """A W&B run directory or ``.wandb`` file that cannot be read; the message says why."""


@dataclasses.dataclass
class WandbRun:
    """What a W&B run's transaction log holds, as rlguard stores it."""

    id: str
    project: str
    name: str | None
    config: dict[str, Any]
    tags: list[str]
    summary: dict[str, Any]
    steps: dict[int, dict[str, float]]  # history (and system stats) by rlguard step

    @property
    def rlguard_id(self) -> str:
        """The id a live ``rlguard watch`` of this run would have used."""
        return rlguard_run_id(self.project, self.id)


def is_wandb_run(path: Path) -> bool:
    """True for a ``.wandb`` file, a run directory holding one, or a ``wandb/`` directory."""
    try:
        run_file(path)
    except WandbFileError:
        return False
    return True


def run_file(path: Path) -> Path:
    """The ``run-*.wandb`` file of ``path``: the file itself, a run directory, or the
    ``latest-run`` of a ``wandb/`` directory (or of the folder holding it)."""
    path = Path(path)
    if path.is_file():
        if path.suffix == ".wandb":
            return path
        raise WandbFileError(f"{path} is not a W&B transaction log (run-<id>.wandb)")
    for folder in (path, path / "latest-run", path / "wandb" / "latest-run"):
        found = sorted(folder.glob("run-*.wandb")) if folder.is_dir() else []
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise WandbFileError(f"{folder} holds {len(found)} .wandb files; name one of them")
    raise WandbFileError(
        f"{path} is not a W&B run: no run-<id>.wandb in it (give a run directory such as "
        "wandb/latest-run, wandb/offline-run-*, wandb/run-*, or the .wandb file)"
    )


def chunks(data: bytes, path: Path) -> list[bytes]:
    """Each record's bytes in a whole ``.wandb`` file; a bad header, a bad CRC or a cut record
    raises ``WandbFileError``."""
    check_header(data, path)
    records, end = whole_records(data[len(MAGIC) :], len(MAGIC), path)
    if end < len(data):
        raise WandbFileError(
            f"{path} is truncated at byte {end} of {len(data)} (the run was cut off, or is still "
            "being written: `rlguard follow wandb DIR` reads a live run)"
        )
    return records


def check_header(data: bytes, path: Path) -> None:
    """Refuse a file that is not a version-0 W&B transaction log, saying which it is."""
    if data.startswith(MAGIC):
        return
    if data[:4] == MAGIC[:4]:
        raise WandbFileError(
            f"{path}: .wandb log version {data[6]} is not supported (rlguard reads version 0, "
            "written by wandb up to 0.31); import a W&B export instead"
        )
    raise WandbFileError(f"{path} is not a W&B transaction log (no :W&B header)")


def whole_records(data: bytes, start: int, path: Path) -> tuple[list[bytes], int]:
    """The whole records in ``data``, the file's bytes from offset ``start`` (a record's end),
    and the offset up to which it was read: a record still being written is left for later."""
    records: list[bytes] = []
    pos = done = start
    end = start + len(data)
    parts = b""
    while pos < end:
        left_in_block = BLOCK_BYTES - pos % BLOCK_BYTES
        header = data[pos - start : pos - start + CHUNK_HEADER.size]
        if left_in_block < CHUNK_HEADER.size or header == bytes(CHUNK_HEADER.size):
            pos = min(pos + left_in_block, end)  # a block's zero padding, or its unwritten rest
        elif len(header) < CHUNK_HEADER.size:
            break
        else:
            body = _chunk_body(data, pos - start, path, pos)
            if body is None:
                break
            pos += CHUNK_HEADER.size + len(body)
            kind = header[-1]
            parts = body if kind in (FULL, FIRST) else parts + body
            if kind in (FULL, LAST):
                records.append(parts)
                parts = b""
        if not parts:
            done = pos
    return records, done


def _chunk_body(data: bytes, at: int, path: Path, offset: int) -> bytes | None:
    """The body of the chunk at ``data[at]``; None when it is not all written yet."""
    crc, length, kind = CHUNK_HEADER.unpack_from(data, at)
    body = data[at + CHUNK_HEADER.size : at + CHUNK_HEADER.size + length]
    if len(body) < length:
        return None
    if (
        kind not in (FULL, FIRST, MIDDLE, LAST)
        or zlib.crc32(body, zlib.crc32(bytes([kind]))) != crc
    ):
        raise WandbFileError(f"{path}: corrupt record at byte {offset} (checksum mismatch)")
    return body


def read_run(path: Path) -> WandbRun:
    """A whole W&B run from its directory or ``.wandb`` file; nothing is returned on error."""
    source = run_file(path)
    reader = RecordReader()
    for raw in chunks(source.read_bytes(), source):
        reader.add(decode(raw, source))
    if reader.run is None:
        raise WandbFileError(f"{source} has no run record; is the run's first write missing?")
    return reader.run


def decode(raw: bytes, path: Path) -> Any:
    """One record's bytes as wandb's own ``Record`` message."""
    try:
        from wandb.proto import wandb_internal_pb2
    except ImportError as exc:
        raise WandbFileError(f"reading {path} needs wandb: pip install 'rlguard[wandb]'") from exc
    record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]
    try:
        record.ParseFromString(raw)
    except Exception as exc:  # protobuf's DecodeError
        raise WandbFileError(f"{path}: a record does not decode ({exc})") from exc
    return record


class RecordReader:
    """Folds a run's records, in file order, into a ``WandbRun`` (its ``steps``), or hands
    each row to ``on_row(step, values)`` as it comes."""

    def __init__(self, on_row: Callable[[int, dict[str, Any]], None] | None = None) -> None:
        self.on_row = on_row
        self.run: WandbRun | None = None
        self.axes = StepAxes()
        self.last_step = 0

    def add(self, record: Any) -> None:
        """Take one ``wandb_internal_pb2.Record``."""
        kind = record.WhichOneof("record_type")
        handler = getattr(self, f"_on_{kind}", None)
        if handler is not None:
            handler(getattr(record, kind))

    def _on_run(self, run: Any) -> None:
        self.run = WandbRun(
            id=run.run_id,
            project=run.project or "uncategorized",
            name=run.display_name or None,
            config={},
            tags=list(run.tags),
            summary={},
            steps={},
        )
        self._on_config(run.config)

    def _on_config(self, config: Any) -> None:
        if self.run is not None:
            for key, value in _items(config.update):
                if not key.startswith("_"):
                    self.run.config[key] = value

    def _on_metric(self, metric: Any) -> None:
        if metric.step_metric:
            self.axes.define(metric.glob_name or metric.name, metric.step_metric)

    def _on_history(self, history: Any) -> None:
        values = dict(_items(history.item))
        step = values.pop("_step", history.step.num)
        media = tuple(k[: -len("_type")] for k in values if k.endswith("._type"))
        numbers = {
            k: v
            for k, v in values.items()
            if not k.startswith("_") and _number(v) and not k.startswith(media)
        }
        self.last_step = int(step)
        groups = self.axes.split(self.last_step, numbers) if self.axes else {step: numbers}
        for at, row in groups.items():
            self._put(int(at), row)

    def _on_summary(self, summary: Any) -> None:
        if self.run is not None:
            for key, value in _items(summary.update):
                if not key.startswith("_") and (_number(value) or isinstance(value, str)):
                    self.run.summary[key] = value

    def _on_stats(self, stats: Any) -> None:
        self._put(self.last_step, system_values(dict(_items(stats.item))))

    def _put(self, step: int, values: dict[str, Any]) -> None:
        if self.run is None or not values:
            return
        if self.on_row is not None:
            self.on_row(step, values)
        else:
            self.run.steps.setdefault(step, {}).update(values)


def system_values(stats: dict[str, Any]) -> dict[str, float]:
    """W&B's system metrics under the keys of rlguard's GPU and host panels; the rest (disk,
    network, CPU per core …) as ``system.<name>``, as W&B's UI names them."""
    values: dict[str, float] = {}
    for name, value in stats.items():
        if not _number(value):
            continue
        match = GPU_STAT.match(name)
        if match and match[2] in GPU_KEYS:
            key, scale = GPU_KEYS[match[2]]
            values[f"system/gpu{match[1]}/{key}"] = float(value) * scale
        elif name in HOST_KEYS:
            key, scale = HOST_KEYS[name]
            values[key] = float(value) * scale
        else:
            values[f"system.{name}"] = float(value)
    return values


def _items(items: Any) -> Iterator[tuple[str, Any]]:
    """``(dotted key, value)`` of proto items holding ``key`` or ``nested_key`` and JSON."""
    for item in items:
        nested = getattr(item, "nested_key", None)  # stats items have a plain key only
        key = ".".join(nested) if nested else item.key
        yield key, json.loads(item.value_json)


def _number(value: Any) -> bool:
    return type(value) in (int, float, bool)
