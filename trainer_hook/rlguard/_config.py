"""HookConfig: every setting of the hook, read once at ``init()``.

Precedence: keyword arguments > ``RLGUARD_*`` environment variables > defaults. Errors name the
key, the bad value and the fix, and are raised by ``init()`` before anything starts.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rlguard.errors import ConfigError
from rlguard.protocol import RUN_ID

DEFAULT_URL = "http://127.0.0.1:8000"
RESUME_MODES = ("allow", "must", "never")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def default_spool_dir() -> Path:
    """``$XDG_CACHE_HOME/rlguard/spool`` (``~/.cache/rlguard/spool``)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "rlguard" / "spool"


def new_run_id() -> str:
    """A sortable, unique run id such as ``20250101-120000-3f9a1c2b``."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:8]


SEVERITIES = ("info", "warn", "critical")  # in order: a policy acts at its severity and above


@dataclasses.dataclass(frozen=True)
class HookConfig:
    """The validated settings of one run's hook."""

    project: str = "default"
    name: str | None = None
    run_id: str = ""
    config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    tags: tuple[str, ...] = ()
    url: str = DEFAULT_URL
    token: str | None = None
    resume: str = "allow"
    resume_from_step: int | None = None
    spool_dir: Path = dataclasses.field(default_factory=default_spool_dir)
    gpu: bool = True
    gpu_interval_s: float = 5.0
    flush_interval_s: float = 0.5
    max_batch_points: int = 20_000
    max_queue_mb: float = 256.0
    max_samples_per_step: int = 64
    max_sample_kb: float = 32.0
    spool_budget_mb: float = 1024.0
    finish_timeout_s: float = 30.0
    request_timeout_s: float = 10.0
    backoff_base_s: float = 0.5
    backoff_cap_s: float = 30.0
    heartbeat_interval_s: float = 30.0
    command_poll_s: float = 5.0  # ask for stop/checkpoint commands when no batch went this long
    rank_zero_only: bool = True
    enabled: bool = True
    quiet: bool = False  # no line at init() saying where the run's page is
    on_alert: Callable[[dict[str, Any]], object] | None = None
    on_command: Callable[[dict[str, Any]], object] | None = None  # a stop or checkpoint received
    stop_on: str | None = None  # "warn" or "critical": run.should_stop after such an alert
    checkpoint_on: str | None = None  # likewise for run.checkpoint_request()

    def __repr__(self) -> str:
        token = "***" if self.token else None
        return (
            f"HookConfig(project={self.project!r}, run_id={self.run_id!r}, url={self.url!r}, "
            f"token={token})"
        )

    @property
    def spool_budget_bytes(self) -> int:
        """``spool_budget_mb`` in bytes."""
        return int(self.spool_budget_mb * 1024 * 1024)

    @property
    def max_queue_bytes(self) -> int:
        """``max_queue_mb`` in bytes."""
        return int(self.max_queue_mb * 1024 * 1024)

    @property
    def max_sample_bytes(self) -> int:
        """``max_sample_kb`` in bytes."""
        return int(self.max_sample_kb * 1024)


def _parse_bool(key: str, raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"{key}={raw!r}: expected a boolean; use 1/0, true/false, yes/no or on/off")


def _parse_number(kind: type, minimum: float, hint: str) -> Callable[[str, object], Any]:
    def parse(key: str, raw: object) -> Any:
        try:
            if isinstance(raw, bool):
                raise TypeError
            value = kind(raw)
            if kind is int and isinstance(raw, float) and raw != value:
                raise ValueError
        except (TypeError, ValueError):
            raise ConfigError(f"{key}={raw!r}: expected {hint}") from None
        if value < minimum or value != value:
            raise ConfigError(f"{key}={raw!r}: expected {hint}")
        return value

    return parse


def _parse_str(key: str, raw: object) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise ConfigError(f"{key}={raw!r}: expected a non-empty string")
    return raw.strip()


def _parse_optional_str(key: str, raw: object) -> str | None:
    return None if raw is None or raw == "" else _parse_str(key, raw)


def _parse_token(key: str, raw: object) -> str | None:
    """A bearer token, refused (never echoed: it is a secret) unless it is one printable word."""
    if raw is None or raw == "":
        return None
    token = raw.strip() if isinstance(raw, str) else ""
    if not token or not token.isprintable() or any(char.isspace() for char in token):
        raise ConfigError(
            f"{key}: expected an API token, one word of printable characters; this one is "
            "empty or holds a space, a line break or a control character (a file read with "
            "its trailing newline inside the token is the usual cause)"
        )
    return token


def _parse_run_id(key: str, raw: object) -> str:
    if not isinstance(raw, str) or not RUN_ID.fullmatch(raw):
        raise ConfigError(
            f"{key}={raw!r}: a run id is 1-128 characters of letters, digits and ._:@+- "
            "starting with a letter or digit; leave it unset to generate one"
        )
    return raw


def _parse_url(key: str, raw: object) -> str:
    if not isinstance(raw, str) or not re.match(r"^https?://[^/\s]+", raw):
        raise ConfigError(f"{key}={raw!r}: expected the service address, e.g. {DEFAULT_URL}")
    return raw.rstrip("/")


def _parse_tags(key: str, raw: object) -> tuple[str, ...]:
    items = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(items, (list, tuple)) or not all(isinstance(t, str) for t in items):
        raise ConfigError(f"{key}={raw!r}: expected a list of strings, e.g. ['grpo', 'baseline']")
    tags = tuple(t.strip() for t in items if t.strip())
    if len(tags) > 64 or any(len(t) > 128 for t in tags):
        raise ConfigError(f"{key}={raw!r}: at most 64 tags of at most 128 characters")
    return tags


def _parse_config(key: str, raw: object) -> dict[str, Any]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise ConfigError(f"{key}={raw!r}: expected a JSON object ({exc})") from None
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{key}={raw!r}: expected a dict of hyper-parameters")
    try:
        return json.loads(json.dumps(dict(raw), default=_jsonable_fallback))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{key}: cannot be encoded as JSON ({exc}); pass plain values") from None


def _jsonable_fallback(value: object) -> object:
    item = getattr(value, "item", None)  # numpy and torch scalars
    if callable(item):
        try:
            return item()
        except (TypeError, ValueError, RuntimeError):
            pass
    return str(value)


def _parse_resume(key: str, raw: object) -> str:
    if raw is True:
        return "must"
    if raw is False:
        return "never"
    if raw not in RESUME_MODES:
        raise ConfigError(f"{key}={raw!r}: expected one of {', '.join(RESUME_MODES)}")
    return str(raw)


def _parse_callback(key: str, raw: object) -> object:
    if raw is not None and not callable(raw):
        what = key.removeprefix("on_")
        raise ConfigError(f"{key}={raw!r}: expected a function taking one {what} dict")
    return raw


def _parse_severity(key: str, raw: object) -> str | None:
    text = str(raw).strip().lower()
    if text in ("", "none", "off", "never"):
        return None
    if text not in SEVERITIES:
        raise ConfigError(f"{key}={raw!r}: expected one of {', '.join(SEVERITIES)} or none")
    return text


_SECONDS = _parse_number(float, 0.0, "a number of seconds >= 0")
_POSITIVE_INT = _parse_number(int, 1, "an integer >= 1")

# field -> parser; every field except config/on_alert can also come from RLGUARD_<FIELD>
_PARSERS: dict[str, Callable[[str, object], Any]] = {
    "project": _parse_str,
    "name": _parse_optional_str,
    "run_id": _parse_run_id,
    "config": _parse_config,
    "tags": _parse_tags,
    "url": _parse_url,
    "token": _parse_token,
    "resume": _parse_resume,
    "resume_from_step": _parse_number(int, 0, "a step number >= 0"),
    "spool_dir": lambda key, raw: Path(os.path.expanduser(str(raw))),
    "gpu": _parse_bool,
    "gpu_interval_s": _parse_number(float, 0.1, "a number of seconds >= 0.1"),
    "flush_interval_s": _parse_number(float, 0.01, "a number of seconds >= 0.01, e.g. 0.5"),
    "max_batch_points": _POSITIVE_INT,
    "max_queue_mb": _parse_number(float, 0.001, "a number of megabytes > 0, e.g. 256"),
    "max_samples_per_step": _parse_number(int, 0, "an integer >= 0 (0 keeps no samples)"),
    "max_sample_kb": _parse_number(float, 1.0, "a number of kilobytes >= 1, e.g. 32"),
    "spool_budget_mb": _parse_number(float, 0.0, "a number of megabytes >= 0"),
    "finish_timeout_s": _SECONDS,
    "request_timeout_s": _parse_number(float, 0.1, "a number of seconds >= 0.1"),
    "backoff_base_s": _parse_number(float, 0.01, "a number of seconds >= 0.01"),
    "backoff_cap_s": _parse_number(float, 0.01, "a number of seconds >= 0.01"),
    "heartbeat_interval_s": _parse_number(float, 1.0, "a number of seconds >= 1"),
    "command_poll_s": _parse_number(float, 0.1, "a number of seconds >= 0.1"),
    "rank_zero_only": _parse_bool,
    "enabled": _parse_bool,
    "quiet": _parse_bool,
    "on_alert": _parse_callback,
    "on_command": _parse_callback,
    "stop_on": _parse_severity,
    "checkpoint_on": _parse_severity,
}
ENV_KEYS = {
    name: "RLGUARD_" + name.upper() for name in _PARSERS if name not in ("on_alert", "on_command")
}


def load_config(environ: Mapping[str, str] | None = None, **kwargs: Any) -> HookConfig:
    """Build a HookConfig from keyword arguments, then ``RLGUARD_*`` variables, then defaults."""
    env = os.environ if environ is None else environ
    unknown = sorted(set(kwargs) - set(_PARSERS))
    if unknown:
        raise ConfigError(
            f"init() got unknown argument(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(_PARSERS))}"
        )
    values: dict[str, Any] = {}
    for name, parse in _PARSERS.items():
        if kwargs.get(name) is not None:
            values[name] = parse(name, kwargs[name])
        elif name in ENV_KEYS and env.get(ENV_KEYS[name], "") != "":
            values[name] = parse(ENV_KEYS[name], env[ENV_KEYS[name]])
    if values.get("resume") == "never":
        values.pop("run_id", None)
    if values.get("resume") == "must" and "run_id" not in values:
        raise ConfigError("resume='must' needs run_id (or RLGUARD_RUN_ID): the run to continue")
    values.setdefault("run_id", new_run_id())
    return HookConfig(**values)
