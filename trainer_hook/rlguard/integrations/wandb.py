"""Tee every W&B run of this process into rlguard: ``rlguard.integrations.wandb.attach()``.

    from rlguard.integrations import wandb as rlguard_wandb
    rlguard_wandb.attach()          # or run the script under `rlguard watch -- python train.py`
    run = wandb.init(project="grpo", config={"lr": 1e-6})
    wandb.log({"actor/entropy": 0.52, "critic/score/mean": 0.4})   # also goes to rlguard

Each W&B run gets an rlguard run with W&B's project, name, config, tags and summary, under an
id made from W&B's (``wandb-<project>-<id>``), so a resumed W&B run continues the same rlguard
run. The rows rlguard stores are the ones W&B commits, at W&B's ``_step`` (``step=``,
``commit=False``, the implicit counter), and keys bound to a ``define_metric`` step axis are
stored at that axis' value. The tee runs after W&B's own call returns and never changes its
arguments or results; any error of the tee is logged once and swallowed. W&B media and other
non-numbers are left out; nested dicts become ``parent.child`` keys, as W&B names them.
"""

from __future__ import annotations

import atexit
import fnmatch
import functools
import hashlib
import json
import logging
import math
import os
import re
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import rlguard
from rlguard._report import Warnings
from rlguard.protocol import RUN_ID

logger = logging.getLogger("rlguard")
PLAIN_TYPES = frozenset({float, int, bool})
NUMERIC_MODULES = ("numpy", "torch", "jax")  # scalars the sender thread converts
MAX_TAGS = 64
MAX_TAG_CHARS = 128
_warnings = Warnings()


class StepMirror:
    """W&B's history rows from a run's ``log()`` calls: which call commits a row, at which step.

    The rules of W&B's partial history: a ``step`` below the current one is dropped; a higher
    one commits the pending row first; no ``step`` and no ``commit`` commits; ``commit=False``
    accumulates; each committed row advances the step by one.
    """

    def __init__(self, start_step: int, emit: Callable[[int, dict[str, Any]], None]) -> None:
        self.step = start_step
        self.pending: dict[str, Any] = {}
        self._emit = emit
        self._lock = threading.Lock()

    def log(self, data: Mapping[str, Any], step: int | None, commit: bool | None) -> None:
        """Account for one ``run.log(data, step, commit)`` that W&B accepted."""
        with self._lock:
            if step is not None:
                if step < self.step:
                    return  # W&B drops it too (it warns)
                if step > self.step:
                    self._commit()
                    self.step = step
            elif commit is None:
                commit = True
            self.pending.update(data)
            if commit:
                self._commit()

    def flush(self) -> None:
        """Commit the pending row, as W&B does when the run finishes."""
        with self._lock:
            self._commit()

    def _commit(self) -> None:
        if self.pending:
            row, self.pending = self.pending, {}
            self._emit(self.step, row)
            self.step += 1


class StepAxes:
    """``define_metric(name, step_metric=axis)``: the axis each key is stored along."""

    def __init__(self) -> None:
        self.exact: dict[str, str] = {}
        self.globs: list[tuple[str, str]] = []
        self.last: dict[str, int] = {}  # last integral value of each axis (W&B's step_sync)

    def __bool__(self) -> bool:
        return bool(self.exact or self.globs)

    def define(self, name: str, axis: str) -> None:
        """Bind ``name`` (a glob with ``*`` allowed) to the step axis ``axis``."""
        if "*" in name:
            self.globs = [(g, a) for g, a in self.globs if g != name] + [(name, axis)]
        else:
            self.exact[name] = axis

    def split(self, step: int, row: dict[str, Any]) -> dict[int, dict[str, Any]]:
        """The row's keys grouped by the step each is stored at (``step`` without an axis).

        As W&B's ``step_sync``, an axis the row lacks is added at its last value."""
        for name in {*self.exact.values(), *(a for _, a in self.globs)}:
            position = _integral(row.get(name))
            if position is not None:
                self.last[name] = position
        groups: dict[int, dict[str, Any]] = {}
        for key, value in row.items():
            axis = self.axis_of(key)
            if axis is None or axis == key or axis not in self.last:
                groups.setdefault(step, {})[key] = value
                continue
            groups.setdefault(self.last[axis], {})[key] = value
            if axis not in row:
                groups.setdefault(step, {})[axis] = self.last[axis]
        return groups

    def axis_of(self, key: str) -> str | None:
        """The step axis ``key`` was bound to, if any (an exact name wins over a glob)."""
        axis = self.exact.get(key)
        if axis is None:
            axis = next((a for g, a in self.globs if fnmatch.fnmatchcase(key, g)), None)
        return axis


class WandbTee:
    """One W&B run's rlguard counterpart."""

    def __init__(self, wandb_run: Any, start_step: int | None = None) -> None:
        self.axes = StepAxes()
        self.summary: dict[str, Any] = {}
        self._stop_fn = getattr(getattr(wandb_run, "settings", None), "stop_fn", None)
        # quiet: the run's link line would land in W&B's captured console, which must not change
        settings = run_settings(wandb_run)
        self.run = rlguard.init(**settings, quiet=True, on_command=self._on_command)
        if start_step is None:
            start_step = int(getattr(wandb_run, "starting_step", 0) or 0)
        self.mirror = StepMirror(start_step, self._store)
        self.finished = False
        atexit.register(self._flush_at_exit)  # runs before rlguard's own atexit finish

    def __repr__(self) -> str:
        return f"<WandbTee {self.run.id!r} step={self.mirror.step}>"

    def log(self, data: Mapping[str, Any], step: Any, commit: Any) -> None:
        """Mirror one accepted ``run.log()`` call."""
        if not PLAIN_TYPES.issuperset(map(type, data.values())):
            data = numeric_values(data)
        self.mirror.log(data, None if step is None else int(step), commit)

    def _store(self, step: int, row: dict[str, Any]) -> None:
        self.summary.update(row)
        if not self.axes:
            self.run.log(row, step=step)
            return
        for at, values in sorted(self.axes.split(step, row).items()):
            self.run.log(values, step=at)

    def update_summary(self, record: Any) -> None:
        """W&B's explicit ``run.summary`` changes (its ``SummaryRecord``: key paths, values)."""
        for item in record.update:
            key = _summary_key(item.key)
            if not key.startswith("_"):
                self.summary[key] = item.value
        for item in record.remove:
            self.summary.pop(_summary_key(item.key), None)

    def _on_command(self, command: dict[str, Any]) -> None:
        """A stop asked of rlguard stops the run as W&B's own stop button does: the main thread
        is interrupted (KeyboardInterrupt), unless the run set its own ``stop_fn``."""
        if command.get("kind") != "stop":
            return
        if self._stop_fn is not None:
            self._stop_fn()
            return
        from wandb.sdk.lib import interrupt

        interrupt.interrupt_main()

    def finish(self, exit_code: Any) -> None:
        """Commit the pending row and finish the rlguard run with W&B's outcome."""
        if self.finished:
            return
        self.finished = True
        atexit.unregister(self._flush_at_exit)
        self.mirror.flush()
        summary = {k: v for k, v in self.summary.items() if _json_scalar(v)}
        self.run.finish(status="failed" if exit_code else "finished", summary=summary)

    def _flush_at_exit(self) -> None:
        """W&B commits its pending row at exit; so does the tee, unless the rlguard run was
        finished already (an uncaught exception: rlguard's excepthook marked it failed)."""
        if not getattr(self.run, "_finished", False):
            _guarded("flush at exit", self.mirror.flush)


def run_settings(wandb_run: Any) -> dict[str, Any]:
    """``rlguard.init()`` arguments for a W&B run: its identity, config, tags and link."""
    project = str(getattr(wandb_run, "project", None) or "uncategorized")
    config = json.loads(json.dumps(_config_of(wandb_run), default=str))
    config["wandb"] = {
        "id": wandb_run.id,
        "project": project,
        "url": getattr(wandb_run, "url", None),
        "dir": getattr(wandb_run, "dir", None),
    }
    tags = [t for t in (getattr(wandb_run, "tags", None) or ()) if 0 < len(t) <= MAX_TAG_CHARS]
    settings: dict[str, Any] = {
        "run_id": rlguard_run_id(project, wandb_run.id),
        "name": getattr(wandb_run, "name", None) or wandb_run.id,
        "config": config,
        "tags": tags[:MAX_TAGS],
    }
    if not os.environ.get("RLGUARD_PROJECT"):
        settings["project"] = project
    return settings


def rlguard_run_id(project: str, wandb_id: str) -> str:
    """``wandb-<project>-<id>``, the same in every process of the run; characters rlguard's
    ids refuse (and an id too long) are replaced, with a hash to keep it unique."""
    wanted = f"wandb-{project}-{wandb_id}"
    if RUN_ID.fullmatch(wanted):
        return wanted
    digest = hashlib.sha256(wanted.encode()).hexdigest()[:10]
    return f"{re.sub(r'[^A-Za-z0-9._:@+-]', '-', wanted)[:100]}-{digest}"


def numeric_values(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """The numbers of a logged dict: nested dicts as ``parent.child``, media and text dropped."""
    values: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if type(value) in PLAIN_TYPES:
            values[name] = value
        elif isinstance(value, Mapping):
            values.update(numeric_values(value, f"{name}."))
        elif type(value).__module__.partition(".")[0] in NUMERIC_MODULES and _is_scalar(value):
            values[name] = value
    return values


def _is_scalar(value: Any) -> bool:
    shape = getattr(value, "shape", None)
    return shape is not None and math.prod(shape) == 1


def _summary_key(key: Any) -> str:
    return ".".join(map(str, key)) if isinstance(key, tuple) else str(key)


def _integral(value: Any) -> int | None:
    if type(value) is int or (isinstance(value, float) and value.is_integer()):
        return int(value)
    return None


def _json_scalar(value: Any) -> bool:
    return type(value) in PLAIN_TYPES or isinstance(value, str)


def _config_of(wandb_run: Any) -> dict[str, Any]:
    config = getattr(wandb_run, "config", None)
    as_dict = getattr(config, "as_dict", None)
    values = dict(as_dict() if callable(as_dict) else config or {})
    return {k: v for k, v in values.items() if not str(k).startswith("_")}


# ---- the patches -------------------------------------------------------------------------------

_tees: weakref.WeakKeyDictionary[Any, WandbTee | None] = weakref.WeakKeyDictionary()
_originals: dict[tuple[Any, str], Any] = {}
_attach_lock = threading.Lock()


def _guarded(what: str, action: Callable[[], Any]) -> Any:
    """Run a tee action; an error is logged once per kind and never reaches the training loop."""
    try:
        return action()
    except Exception as exc:
        _warnings.warn_once(
            f"{what}:{type(exc).__name__}",
            f"rlguard: the W&B tee failed to {what} ({type(exc).__name__}: {exc}); W&B is not "
            "affected, rlguard may miss data (shown once)",
        )
        return None


def _tee_for(wandb_run: Any, start_step: int | None = None) -> WandbTee | None:
    """The run's tee, started on first use (at ``start_step``, default the run's first step);
    None when it could not start (warned once)."""
    try:
        return _tees[wandb_run]
    except KeyError:
        pass
    except TypeError:  # not weak-referenceable: not a W&B run we know
        return None
    with _attach_lock:
        if wandb_run not in _tees:
            if getattr(wandb_run, "disabled", False):  # mode="disabled": nothing to mirror
                _tees[wandb_run] = None
            else:
                start = lambda: WandbTee(wandb_run, start_step)  # noqa: E731
                _tees[wandb_run] = _guarded("start an rlguard run", start)
        return _tees[wandb_run]


def _after(action: str, tee_call: Callable[..., None]) -> Callable[[Any], Any]:
    """Wrap a W&B method so that ``tee_call(tee, result, *args, **kwargs)`` runs after it."""

    def wrap(original: Any) -> Any:
        @functools.wraps(original)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(self, *args, **kwargs)
            tee = _tees.get(self) if action == "finish" else _tee_for(self)
            if tee is not None and not tee.finished:
                _guarded(action, lambda: tee_call(tee, result, *args, **kwargs))
            return result

        return wrapper

    return wrap


def _tee_log(
    tee: WandbTee, _: Any, data: Any, step: Any = None, commit: Any = None, **__: Any
) -> None:
    tee.log(data, step, commit)


def _tee_define_metric(
    tee: WandbTee, _: Any, name: str, step_metric: Any = None, *args: Any, **__: Any
) -> None:
    if step_metric is not None:
        tee.axes.define(name, getattr(step_metric, "name", step_metric))


def _tee_summary(tee: WandbTee, _: Any, record: Any) -> None:
    tee.update_summary(record)


def _tee_finish(tee: WandbTee, _: Any, exit_code: Any = None) -> None:
    tee.finish(exit_code)


METHODS: dict[str, tuple[str, Callable[..., None]]] = {  # Run method -> what the tee does after it
    "log": ("log", _tee_log),
    "define_metric": ("define metric", _tee_define_metric),
    "_summary_update_callback": ("update summary", _tee_summary),
    "_finish": ("finish", _tee_finish),
}


def attach() -> None:
    """Tee every W&B run of this process (started before or after this call) into rlguard."""
    import wandb
    from wandb.sdk import wandb_init
    from wandb.sdk.wandb_run import Run

    with _attach_lock:
        if _originals:
            return
        for name, (action, tee_call) in METHODS.items():
            original = getattr(Run, name, None)
            if original is not None:
                _originals[(Run, name)] = original
                setattr(Run, name, _after(action, tee_call)(original))
        for module in (wandb, wandb.sdk, wandb_init):
            _originals[(module, "init")] = module.init
            module.init = _init_then_tee(module.init)  # type: ignore[attr-defined]
    live = wandb.run
    if live is not None:  # attached late: tee the live run from W&B's current step on
        _tee_for(live, _guarded("read the W&B step", lambda: int(live.step)))
        wandb.log = live.log  # wandb.log was bound to the unwrapped method


def tee_of(wandb_run: Any) -> rlguard.Run | None:
    """The rlguard run a W&B run is teed into (e.g. for ``log_samples`` or ``should_stop``)."""
    tee = _tees.get(wandb_run)
    return None if tee is None else tee.run


def detach() -> None:
    """Undo ``attach()``: W&B's methods as they were; tees already started keep their runs."""
    with _attach_lock:
        for (owner, name), original in _originals.items():
            setattr(owner, name, original)
        _originals.clear()


def _init_then_tee(init: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(init)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        run = init(*args, **kwargs)
        _tee_for(run)
        return run

    return wrapper
