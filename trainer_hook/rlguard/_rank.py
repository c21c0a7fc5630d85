"""Which process of a distributed job this is: only global rank 0 logs by default."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping


def global_rank(environ: Mapping[str, str] | None = None) -> int:
    """torch.distributed's rank if it is already initialised, else ``RANK``, else ``LOCAL_RANK``."""
    dist = sys.modules.get("torch.distributed")  # never import torch for this
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    env = os.environ if environ is None else environ
    for name in ("RANK", "LOCAL_RANK"):
        value = env.get(name, "").strip()
        if value.lstrip("-").isdigit():
            return int(value)
    return 0
