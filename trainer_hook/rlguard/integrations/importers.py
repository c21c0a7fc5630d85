"""Readers of finished runs' logs: each yields ``(step, {key: value})`` in file order.

Formats: verl console logs (3-decimal and full-repr values, ``np.float64(...)``, ANSI-coloured
Ray prefixes), verl ``file`` logger JSONL, TRL/transformers console dicts (and ms-swift's, printed
as JSON objects) and ``trainer_state.json`` log history, OpenRLHF ``✨ Global step N: {...}``
lines, TensorBoard event directories, W&B run directories, W&B history exports
(``scan_history()`` JSON lines, a chart's CSV) and CSV. ``detect_format`` picks one from the
path and, for text logs, from which reader would take the most lines of the file as steps (a
verl log opens with its printed config, dict-shaped lines that alone would pass for TRL's).
"""

from __future__ import annotations

import ast
import csv
import json
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

Record = tuple[int, dict[str, Any]]

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
VERL_STEP = re.compile(r"(?:^|\s)step:(\d+)\s+-\s+(.*)$")
NUMPY_SCALAR = re.compile(r"^np\.\w+\((.*)\)$")
OPENRLHF_STEP = re.compile(r"Global step (\d+):\s*(\{.*\})\s*$")
BARE_NONFINITE = re.compile(r"(?<![\w'\"])(-?)(nan|inf)(?![\w'\"])")
TRAINER_SUMMARY_KEYS = frozenset({"train_runtime", "train_samples_per_second", "total_flos"})
SWIFT_PROGRESS_KEY = "global_step/max_steps"  # ms-swift's JSON log lines: "3/547"
DETECT_MAX_LINES = 1_000_000  # lines of a text log read to tell its format


def parse_number(text: str) -> float | None:
    """A float from a console value: ``0.53``, ``np.float64(0.0066)``, ``nan``, ``'1.2e-3'``."""
    text = text.strip().strip("'\"")
    match = NUMPY_SCALAR.match(text)
    if match:
        text = match[1]
    try:
        return float(text)
    except ValueError:
        return None


def read_verl_console(path: Path) -> Iterator[Record]:
    """``step:12 - actor/entropy:0.53 - ...`` lines, behind an optional Ray prefix."""
    for line in _lines(path):
        match = VERL_STEP.search(ANSI.sub("", line))
        if not match:
            continue
        values: dict[str, Any] = {}
        for item in match[2].split(" - "):
            key, sep, raw = item.rpartition(":")
            number = parse_number(raw) if sep else None
            if key and number is not None:
                values[key.strip()] = number
        yield int(match[1]), values


RAY_PREFIX = re.compile(r"^\s*\([\w.-]+ pid=\d+(?:, ip=[\d.]+)?\)\s?")
CONFIG_MAX_LINES = 5000  # verl prints its config in the first few hundred lines


def read_verl_config(path: Path) -> dict[str, Any] | None:
    """The config a verl console log prints at start (``pprint`` of the resolved OmegaConf
    config, one Ray-prefixed line at a time), as a nested dict; None when the log has none."""
    held: list[str] = []
    for number, line in enumerate(_lines(path)):
        text = RAY_PREFIX.sub("", ANSI.sub("", line)).rstrip()
        if not held and not text.startswith("{'"):
            if number >= CONFIG_MAX_LINES or VERL_STEP.search(text):
                return None
            continue
        held.append(text)
        config = _literal_dict("\n".join(held))
        if config is not None:
            return config
        if len(held) >= CONFIG_MAX_LINES:
            return None
    return None


def read_verl_jsonl(path: Path) -> Iterator[Record]:
    """The verl ``file`` logger: ``{"step": N, "data": {...}}`` per line; null is NaN."""
    for line in _lines(path):
        record = _json_line(line)
        if record is not None and "step" in record:
            yield int(record["step"]), _nulls_to_nan(record.get("data", {}))


def read_trl_console(path: Path, logging_steps: int = 1) -> Iterator[Record]:
    """Console dicts ``{'loss': '0.12', ...}``, each at the trainer's own step where the log
    shows it: the step a line names (ms-swift's ``"global_step/max_steps": "3/547"``), else the
    training progress bar drawn before it (`` 10%|█   | 20/200 [...]``); else the n-th dict is
    step n·logging_steps."""
    n = 0
    bars = TrainingBar()
    for line in _lines(path):
        text = ANSI.sub("", line)
        record = _trl_dict(text)
        bars.read(text if record is None else text[: _dict_start(text)])
        if record is None or TRAINER_SUMMARY_KEYS & record.keys():
            continue
        n += 1
        shown = bars.step(record)
        yield _named_step(record, n * logging_steps if shown is None else shown), record


# A tqdm bar without a description, as transformers' ProgressCallback draws the training bar
# (and the evaluation one): `` 10%|█         | 20/200 [00:10<01:30,  2.00it/s]``. Bars with a
# description (``Loading checkpoint shards:  50%|...``, vLLM's ``Processed prompts: ...``) are
# not it: the text before its percentage is a line start, a carriage return or the end of the
# bar drawn before it (``]``).
PROGRESS_BAR = re.compile(r"(?:^|[\r\]])\s*\d{1,3}%\|[^|\n]*\|\s*(\d+)/(\d+)\s*\[")


class TrainingBar:
    """The training progress bar's count, read from the console text before each dict.

    The training bar is the one drawn last before the first training dict (one whose keys are
    not all ``eval_*``); it is told from the evaluation bar by its total (max_steps). tqdm
    redraws the bar at each optimizer step when a step takes longer than its 0.1 s refresh
    interval (every RL step does), so the count before a dict is the step it was logged at.
    """

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}  # bar total -> its last count
        self.last_total: int | None = None
        self.total: int | None = None  # the training bar's

    def read(self, text: str) -> None:
        """Take the bars drawn in ``text``."""
        for match in PROGRESS_BAR.finditer(text):
            count, total = int(match[1]), int(match[2])
            self.counts[total], self.last_total = count, total

    def step(self, record: dict[str, Any]) -> int | None:
        """The training bar's count for this dict, None where the log shows no training bar."""
        evaluation = all(key.startswith("eval_") for key in record)
        if self.total is None and not evaluation:
            self.total = self.last_total
        return None if self.total is None else self.counts.get(self.total)


def _dict_start(text: str) -> int:
    """Where the first dict opens in ``text`` (-1: none)."""
    starts = [i for i in (text.find("{'"), text.find('{"')) if i >= 0]
    return min(starts, default=-1)


def _named_step(record: dict[str, Any], counted: int) -> int:
    """The step a line names (its progress field, removed from the record), else ``counted``
    (the progress bar's, or the count of dicts)."""
    progress = record.pop(SWIFT_PROGRESS_KEY, None)
    done, sep, _ = str(progress).partition("/")
    return int(done) if sep and done.isdigit() else counted


def _trl_dict(line: str) -> dict[str, Any] | None:
    """A console dict (a Python repr, or a JSON object as ms-swift prints it) whose values are
    mostly numbers (a config's dict lines are not)."""
    text = line.strip()
    start = _dict_start(text)
    if start < 0 or not text.endswith("}"):
        return None
    body = text[start:]
    record = _literal_dict(body) or _json_line(body)
    if not record:
        return None
    values = {k: _coerce(v) for k, v in record.items()}
    numbers = sum(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values.values())
    return values if 2 * numbers > len(values) else None


def read_trainer_state(path: Path) -> Iterator[Record]:
    """``trainer_state.json``: the ``log_history`` entries, each with its ``step``."""
    state = json.loads(path.read_text())
    for entry in state.get("log_history", []):
        if "step" in entry and not TRAINER_SUMMARY_KEYS & entry.keys():
            yield int(entry["step"]), {k: v for k, v in entry.items() if k != "step"}


def read_openrlhf_console(path: Path) -> Iterator[Record]:
    """``✨ Global step N: {'policy_loss': 0.1, ...}`` lines (a Python dict literal)."""
    for line in _lines(path):
        match = OPENRLHF_STEP.search(ANSI.sub("", line))
        if match:
            record = _literal_dict(match[2])
            if record is not None:
                yield int(match[1]), {k: _coerce(v) for k, v in record.items()}


def read_tensorboard(path: Path) -> Iterator[Record]:
    """Scalars of every event file under a TensorBoard directory, merged by step."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    by_step: dict[int, dict[str, Any]] = {}
    runs = sorted({p.parent for p in Path(path).rglob("events.out.tfevents.*")})
    for run_dir in runs:
        accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
        accumulator.Reload()
        prefix = "" if run_dir == Path(path) else str(run_dir.relative_to(path)) + "/"
        for tag in accumulator.Tags()["scalars"]:
            for event in accumulator.Scalars(tag):
                by_step.setdefault(event.step, {})[prefix + tag] = event.value
    yield from sorted(by_step.items())


def read_csv(path: Path) -> Iterator[Record]:
    """A CSV with a ``step`` column and one column per key; empty cells are absent points."""
    with open(path, newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            step = row.pop("step", None)
            if step is None or step == "":
                continue
            values = {k: parse_number(v) for k, v in row.items() if k and v not in ("", None)}
            yield int(float(step)), {k: v for k, v in values.items() if v is not None}


def read_wandb_history(path: Path) -> Iterator[Record]:
    """W&B history as JSON lines, one ``run.scan_history()`` row each: ``_step`` and the
    values; nulls (keys the row lacks), media and ``_``-keys left out, nested dicts dotted."""
    for line in _lines(path):
        row = _json_line(line)
        if row is not None and isinstance(row.get("_step"), int):
            yield row["_step"], _wandb_numbers(row)


def _wandb_numbers(row: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, value in row.items():
        if key.startswith("_"):
            continue
        if isinstance(value, dict) and "_type" not in value:  # a W&B media value has _type
            values.update(_wandb_numbers(value, f"{prefix}{key}."))
        elif type(value) in (int, float, bool):
            values[f"{prefix}{key}"] = value
    return values


def read_wandb_csv(path: Path) -> Iterator[Record]:
    """A W&B chart's CSV export: ``Step`` and ``<run name> - <key>`` columns (``__MIN`` and
    ``__MAX`` band columns left out); the run name is dropped when the file holds one run."""
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        columns = [c for c in reader.fieldnames or [] if " - " in c and not c.endswith(BANDS)]
        runs = {c.split(" - ", 1)[0] for c in columns}
        names = {c: c.split(" - ", 1)[1] if len(runs) == 1 else c for c in columns}
        for row in reader:
            step = parse_number(row.get("Step") or "")
            if step is None:
                continue
            values = {names[c]: parse_number(row[c]) for c in columns if row.get(c)}
            yield int(step), {k: v for k, v in values.items() if v is not None}


BANDS = ("__MIN", "__MAX")


def read_wandb(path: Path) -> Iterator[Record]:
    """A W&B run directory (or its ``run-*.wandb``): history and system stats, by step."""
    from rlguard.integrations.wandb_files import read_run

    yield from sorted(read_run(path).steps.items())


READERS: dict[str, Callable[..., Iterator[Record]]] = {
    "wandb": read_wandb,
    "wandb-history": read_wandb_history,
    "wandb-csv": read_wandb_csv,
    "verl-console": read_verl_console,
    "verl-jsonl": read_verl_jsonl,
    "trl-console": read_trl_console,
    "trainer-state": read_trainer_state,
    "openrlhf-console": read_openrlhf_console,
    "tensorboard": read_tensorboard,
    "csv": read_csv,
}


TEXT_FORMATS = ("verl-jsonl", "openrlhf-console", "verl-console", "trl-console")  # tie order


def detect_format(path: Path) -> str:
    """The reader for ``path``: from its kind and suffix, else the text reader that would take
    the most of its lines as steps."""
    from rlguard.integrations.wandb_files import is_wandb_run

    if is_wandb_run(path):
        return "wandb"
    if path.is_dir():
        return "tensorboard"
    if path.suffix == ".csv":
        return "wandb-csv" if _is_wandb_csv(path) else "csv"
    if path.suffix == ".json":
        return "trainer-state"
    if _is_wandb_history(path):
        return "wandb-history"
    counts = count_step_lines(path)
    best = max(TEXT_FORMATS, key=lambda fmt: (counts[fmt], -TEXT_FORMATS.index(fmt)))
    if counts[best] == 0:
        raise ValueError(f"cannot tell the format of {path}; pass --format ({', '.join(READERS)})")
    return best


def count_step_lines(path: Path, max_lines: int = DETECT_MAX_LINES) -> dict[str, int]:
    """How many of the first ``max_lines`` lines each text format's reader takes as a step."""
    counts = dict.fromkeys(TEXT_FORMATS, 0)
    for number, line in enumerate(_lines(path)):
        if number >= max_lines:
            break
        fmt = _step_format(ANSI.sub("", line))
        if fmt is not None:
            counts[fmt] += 1
    return counts


def _is_wandb_history(path: Path) -> bool:
    """A first line that is a ``scan_history()`` row: a JSON object with an integer ``_step``."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        first = handle.readline()
    row = _json_line(first) if '"_step"' in first else None
    return row is not None and isinstance(row.get("_step"), int)


def _is_wandb_csv(path: Path) -> bool:
    with open(path, newline="", encoding="utf-8") as handle:
        header = next(csv.reader(handle), [])
    return "Step" in header and any(" - " in column for column in header)


def _step_format(line: str) -> str | None:
    if '"step"' in line and '"data"' in line:
        record = _json_line(line)
        if record is not None and "step" in record:
            return "verl-jsonl"
    if OPENRLHF_STEP.search(line):
        return "openrlhf-console"
    if VERL_STEP.search(line):
        return "verl-console"
    if _trl_dict(line) is not None:
        return "trl-console"
    return None


def _lines(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8", errors="replace") as handle:
        yield from handle


def _json_line(line: str) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _nulls_to_nan(data: dict[str, Any]) -> dict[str, Any]:
    return {k: math.nan if v is None else v for k, v in data.items()}


def _literal_dict(text: str) -> dict[str, Any] | None:
    text = NUMPY_SCALAR_ANYWHERE.sub(r"\1", text)
    text = BARE_NONFINITE.sub(lambda m: f"'{m[1]}{m[2]}'", text)  # literal_eval has no nan
    try:
        record = ast.literal_eval(text)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


NUMPY_SCALAR_ANYWHERE = re.compile(r"np\.\w+\(([^()]*)\)")


def _coerce(value: Any) -> Any:
    if isinstance(value, str):
        number = parse_number(value)
        return value if number is None else number
    return value
