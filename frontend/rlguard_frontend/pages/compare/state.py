"""Everything the compare page shows, as one value that reads from and writes to the URL.

>>> state = CompareState.from_query("runs=a,b&group=config.lr&band=minmax&smooth=0.6&theme=dark")
>>> state.runs, state.group_by, state.band, state.smoothing, state.theme
(('a', 'b'), ('config.lr',), 'minmax', 0.6, 'dark')
>>> state.to_query()
'runs=a%2Cb&group=config.lr&band=minmax&smooth=0.6&theme=dark'
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from urllib.parse import parse_qs, urlencode

BANDS = ("std", "minmax")
X_MODES = ("step", "wall", "relative")
THEMES = ("light", "dark")


@dataclass(frozen=True)
class CompareState:
    runs: tuple[str, ...] = ()
    baseline: str | None = None
    group_by: tuple[str, ...] = ()
    signals: tuple[str, ...] = ()  # the panels shown (canonical signals); none: every one
    band: str = "std"
    smoothing: float = 0.0
    xmode: str = "step"
    log: bool = False
    from_step: int | None = None
    to_step: int | None = None
    theme: str | None = None

    @classmethod
    def from_query(cls, query: str | None) -> CompareState:
        """Read a query string; values that make no sense fall back to the defaults."""
        given = {k: v[-1] for k, v in parse_qs((query or "").lstrip("?")).items()}
        return cls(
            runs=_names(given.get("runs")),
            baseline=given.get("baseline") or None,
            group_by=_names(given.get("group")),
            signals=_names(given.get("keys")),
            band=_choice(given.get("band"), BANDS, "std") or "std",
            smoothing=_smoothing(given.get("smooth")),
            xmode=_choice(given.get("x"), X_MODES, "step") or "step",
            log=given.get("log") == "1",
            from_step=_step(given.get("from")),
            to_step=_step(given.get("to")),
            theme=_choice(given.get("theme"), THEMES, None),
        )

    def to_query(self) -> str:
        """The query string that restores this state; defaults are left out."""
        pairs = {
            "runs": ",".join(self.runs),
            "baseline": "" if self.baseline in (None, *self.runs[:1]) else str(self.baseline),
            "group": ",".join(self.group_by),
            "keys": ",".join(self.signals),
            "band": "" if self.band == "std" else self.band,
            "smooth": f"{self.smoothing:g}" if self.smoothing else "",
            "x": "" if self.xmode == "step" else self.xmode,
            "log": "1" if self.log else "",
            "from": "" if self.from_step is None else str(self.from_step),
            "to": "" if self.to_step is None else str(self.to_step),
            "theme": self.theme or "",
        }
        return urlencode({k: v for k, v in pairs.items() if v})

    def with_changes(self, **changes: object) -> CompareState:
        """A copy of the view with the given fields changed."""
        return replace(self, **changes)  # type: ignore[arg-type]

    @property
    def span(self) -> dict[str, int]:
        """The step range for the API, as ``from_step`` / ``to_step``."""
        span = {"from_step": self.from_step, "to_step": self.to_step}
        return {k: v for k, v in span.items() if v is not None}


def _names(value: str | None) -> tuple[str, ...]:
    return tuple(dict.fromkeys(v for v in (value or "").split(",") if v))


def _choice(value: str | None, allowed: tuple[str, ...], default: str | None) -> str | None:
    return value if value in allowed else default


def _smoothing(value: str | None) -> float:
    try:
        number = float(value or 0)
    except ValueError:
        return 0.0
    return min(0.99, max(0.0, number)) if math.isfinite(number) else 0.0


def _step(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() else None
