"""First on ``PYTHONPATH`` under ``rlguard watch``: W&B runs of this process are teed to rlguard.

Python imports this file at start-up. It runs the ``sitecustomize`` it hides, if there is one,
then waits for ``import wandb``: once W&B's own import completes it calls
``rlguard.integrations.wandb.attach()``. Nothing else is imported until then, and a process
that never imports W&B is left as it was.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))


def _run_hidden_sitecustomize() -> None:
    """The next ``sitecustomize`` on the path, which this one shadows, run as Python would."""
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    try:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    except Exception as exc:  # as site.py reports an error in sitecustomize, and goes on
        sys.stderr.write(f"Error in sitecustomize ({spec.origin}): {type(exc).__name__}: {exc}\n")


def _attach() -> None:
    try:
        from rlguard.integrations.wandb import attach

        attach()
    except Exception as exc:  # W&B and training go on untouched
        sys.stderr.write(
            f"rlguard watch: this process's W&B runs are not watched ({type(exc).__name__}: "
            f"{exc}); is rlguard installed in the Python that runs it?\n"
        )


class AttachAfterWandbImport:
    """A meta path finder that answers for ``wandb`` once: its spec, with ``_attach()`` run
    after the module has executed."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        """W&B's own spec for ``wandb`` (its loader attaching after it runs); None otherwise."""
        if fullname != "wandb":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("wandb")
        loader = None if spec is None else spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then_attach(module: Any) -> None:
            exec_module(module)
            _attach()

        loader.exec_module = exec_then_attach  # type: ignore[method-assign]
        return spec


_run_hidden_sitecustomize()
if "wandb" in sys.modules:  # imported by the hidden sitecustomize already
    _attach()
else:
    sys.meta_path.insert(0, AttachAfterWandbImport())
