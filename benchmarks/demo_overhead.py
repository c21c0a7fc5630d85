"""Demo steps per second with logging on vs off, in the same process; prints one JSON object.

Logging goes through a real rlguard run (``rlguard.init`` with the spool directory of a service
that is not running, so nothing blocks) when the hook is importable, else into a list.
Goal: the logged run within 1 % of the unlogged one.
"""

from __future__ import annotations

import json
import tempfile
import time

import torch

from rlguard.demo import train

PRESET, STEPS, SEED = "healthy", 60, 0


def _steps_per_second(log) -> float:  # type: ignore[no-untyped-def]
    result = train(PRESET, steps=STEPS, seed=SEED, device="cpu", log=log)
    return STEPS / sum(m["timing_s/step"] for m in result.history)


def _hook_logger(spool: str):  # type: ignore[no-untyped-def]
    try:
        import rlguard

        run = rlguard.init(
            project="bench", name="demo-overhead", url="http://127.0.0.1:9", spool_dir=spool
        )
    except (ImportError, AttributeError, TypeError):
        sink: list[tuple[dict[str, float], int]] = []
        return "list", lambda metrics, step: sink.append((metrics, step)), lambda: None
    return "rlguard", lambda metrics, step: run.log(metrics, step=step), run.finish


def main() -> None:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as spool:
        via, log, finish = _hook_logger(spool)
        off_first = _steps_per_second(None)
        on = _steps_per_second(log)
        off_second = _steps_per_second(None)
        finish()
    off = (off_first + off_second) / 2  # bracket the logged run against drift of a shared host
    print(
        json.dumps(
            {
                "preset": PRESET,
                "steps": STEPS,
                "logging_via": via,
                "steps_per_s_off": round(off, 2),
                "steps_per_s_on": round(on, 2),
                "ratio_on_over_off": round(on / off, 4),
                "time": time.strftime("%FT%T"),
            }
        )
    )


if __name__ == "__main__":
    main()
