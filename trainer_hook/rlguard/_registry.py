"""The current run and the live runs that atexit and an uncaught exception must finish."""

from __future__ import annotations

import atexit
import sys
import threading
from contextvars import ContextVar
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlguard._run import Run

_current: ContextVar[Run | None] = ContextVar("rlguard_current_run", default=None)
_last: list[Run] = []  # threads started before init() do not see the ContextVar: fall back
_live: dict[int, Run] = {}
_lock = threading.Lock()
_hooks_installed = False


def remember(run: Run) -> None:
    """Make ``run`` current and finish it at exit unless finished before."""
    _current.set(run)
    with _lock:
        _last[:] = [run]
        if run.active:
            _live[id(run)] = run
    _install_hooks()


def forget(run: Run) -> None:
    """Stop tracking a run that finished (atexit no longer needs to finish it)."""
    with _lock:
        _live.pop(id(run), None)


def current() -> Run | None:
    """The run of this context, else the last one started in the process."""
    run = _current.get()
    if run is None and _last:
        run = _last[0]
    return run


def _finish_all(status: str, summary: dict[str, str]) -> None:
    with _lock:
        runs = list(_live.values())
    for run in runs:
        run.finish(status=status, summary=summary)


def _excepthook(
    exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
) -> None:
    _previous_excepthook(exc_type, exc, tb)  # the traceback first: finishing can take a moment
    _finish_all("failed", {"error": f"{exc_type.__name__}: {exc}"})


_previous_excepthook = sys.excepthook


def _install_hooks() -> None:
    """Chain sys.excepthook and register the atexit handler, once per process."""
    global _hooks_installed, _previous_excepthook
    if _hooks_installed:
        return
    _hooks_installed = True
    _previous_excepthook = sys.excepthook
    sys.excepthook = _excepthook
    atexit.register(_finish_all, "finished", {})
