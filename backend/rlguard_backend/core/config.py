"""Service settings: one class, read from ``RLGUARD_*`` variables, validated at start."""

from __future__ import annotations

from ipaddress import IPv4Network, IPv6Network, ip_network
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from rlguard_backend.schemas.webhooks import ALERT_CHANGES, AlertChange, WebhookFormat
from rlguard_backend.schemas.wire import Severity

DEFAULT_DATA_DIR = Path(".rlguard")
# Threads outside the request pools that hold a connection: the liveness watch, the webhook
# worker and the WAL checkpointer.
BACKGROUND_CONNECTIONS = 3


class Webhook(BaseModel):
    """A server-wide hook (``RLGUARD_WEBHOOKS``): where alert state changes are posted, as
    generic JSON or a Slack- or Discord-compatible message; ``secret`` signs them."""

    url: str = Field(pattern=r"^https?://")
    format: WebhookFormat = "json"
    project: str | None = None
    min_severity: Severity = "info"
    events: list[AlertChange] = Field(default_factory=lambda: list(ALERT_CHANGES))
    secret: str | None = Field(default=None, repr=False)


class Settings(BaseSettings):
    """Everything the service is configured with.

    >>> Settings(database_url="sqlite:///runs.db").database_url
    'sqlite:///runs.db'
    """

    model_config = SettingsConfigDict(env_prefix="RLGUARD_", extra="ignore")

    database_url: str = Field(
        default="",
        description="SQLAlchemy URL; empty means the SQLite file ./.rlguard/rlguard.db",
    )
    migrate_on_start: bool = Field(default=True, description="upgrade the schema to head at start")
    max_batch_bytes: int = Field(
        default=32 * 1024 * 1024, gt=0, description="largest accepted batch body, after gunzip"
    )
    max_batch_points: int = Field(default=200_000, gt=0, description="most points in one batch")
    max_batch_samples: int = Field(
        default=4096, gt=0, description="most rollout samples in one samples batch"
    )
    max_request_bytes: int = Field(
        default=1024 * 1024,
        gt=0,
        description="largest body of any other API request (runs, alerts, tokens, backtests)",
    )
    max_request_head_bytes: int = Field(
        default=64 * 1024, gt=0, description="largest request line and headers together"
    )
    request_head_timeout_s: float = Field(
        default=10.0, gt=0, description="a request line and headers must arrive within this"
    )
    request_body_timeout_s: float = Field(
        default=60.0, gt=0, description="a request body must arrive within this of its head"
    )
    keep_alive_timeout_s: int = Field(
        default=5, ge=1, description="an idle keep-alive connection is closed after this"
    )
    max_connections: int = Field(
        default=2048, ge=1, description="connections open at once; beyond it new ones get 503"
    )
    max_sample_search_rows: int = Field(
        default=50_000, gt=0, description="most samples a text search (q=) reads"
    )
    max_series_points: int = Field(
        default=100_000, gt=0, description="largest max_points a series query may ask for"
    )
    sqlite_busy_timeout_ms: int = Field(default=30_000, ge=0)
    sqlite_synchronous: Literal["full", "normal"] = Field(
        default="full",
        description="full: every commit syncs SQLite's write-ahead log, so an acknowledged "
        "batch survives a power cut; normal: synced at checkpoints only (survives a crash of "
        "the service, not of the machine)",
    )
    read_threads: int = Field(
        default=16, ge=1, description="worker threads for reads (health, series, dashboard)"
    )
    write_threads: int = Field(
        default=4, ge=1, description="worker threads for writes (ingest, runs, alerts)"
    )
    max_inflight_writes: int = Field(
        default=128,
        ge=1,
        description="writes admitted at once per process (running or queued for a write "
        "thread); beyond it the service answers 503 with Retry-After at once",
    )
    max_inflight_body_bytes: int = Field(
        default=256 * 1024 * 1024,
        gt=0,
        description="bytes of request bodies held at once by the process, all requests "
        "together; a body that would pass it gets 503 with Retry-After (at least the largest "
        "single body limit)",
    )
    retry_after_s: int = Field(default=1, ge=1, description="Retry-After of a refused write")
    write_hold_warn_s: float = Field(
        default=30.0,
        gt=0,
        description="a unit of work holding the write lock longer than this is logged (a "
        "warning naming its route and run, while it still holds it)",
    )
    backtest_timeout_s: float = Field(
        default=120.0,
        gt=0,
        description="a backtest (POST /runs/{id}/detect) running longer is cancelled with "
        "413, naming the step it reached; narrow it with from_step and to_step",
    )
    log_format: Literal["text", "json"] = Field(
        default="text", description="json: one JSON object per log line, with the request id"
    )
    access_log: bool = Field(default=False, description="log one line per request")
    shutdown_timeout_s: float = Field(
        default=10.0, gt=0, description="on SIGTERM, how long requests in flight may finish"
    )
    heartbeat_timeout_s: float = Field(
        default=300.0, gt=0, description="a running run silent this long is marked crashed"
    )
    api_prefix: str = "/api"
    auth: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="API tokens: auto is off on a loopback address and on anywhere else; "
        "off is refused off loopback",
    )
    identity_header: str = Field(
        default="",
        description="dashboard behind an SSO proxy: the header it sets to the signed-in user "
        "(e.g. X-Forwarded-User), trusted only from trusted_proxies; empty: viewers sign in "
        "with a token",
    )
    trusted_proxies: str = Field(
        default="",
        description="comma-separated addresses or networks of that proxy, e.g. 10.0.0.5,"
        "10.1.0.0/16",
    )
    detectors_enabled: bool = Field(default=True, description="run the stability detectors")
    detector_thresholds: dict[str, Any] = Field(
        default_factory=dict,
        description='server-wide threshold overrides, e.g. {"kl_runaway.level_warn": 0.6}',
    )
    # A live suite's state is checkpointed once it has fed this many steps, or batches, since
    # the last checkpoint: what another process replays from the stored points to take over.
    detector_checkpoint_steps: int = Field(
        default=5000, gt=0, description="steps fed between detector checkpoints (at most)"
    )
    detector_checkpoint_batches: int = Field(
        default=100, gt=0, description="batches fed between detector checkpoints (at most)"
    )
    webhooks: list[Webhook] = Field(
        default_factory=list,
        description='server-wide alert webhooks, e.g. [{"url": "https://hooks.slack.com/...", '
        '"format": "slack", "project": "grpo"}]; project limits a hook to one project; hooks '
        "managed over REST (/api/v1/webhooks) need no restart",
    )
    public_url: str = Field(
        default="",
        description="the dashboard's address as readers open it, e.g. https://rlguard.example.com; "
        "webhook messages and MCP answers then link to the run page at the alert's steps",
    )
    webhook_poll_interval_s: float = Field(default=1.0, gt=0)
    webhook_backoff_base_s: float = Field(default=2.0, gt=0)
    webhook_backoff_cap_s: float = Field(default=300.0, gt=0)
    webhook_max_attempts: int = Field(default=12, ge=1)
    webhook_timeout_s: float = Field(default=10.0, gt=0)

    @model_validator(mode="after")
    def _writes_fill_their_threads(self) -> Settings:
        if self.max_inflight_writes < self.write_threads:
            raise ValueError(
                f"max_inflight_writes={self.max_inflight_writes} is below write_threads="
                f"{self.write_threads}, so some write threads could never be used; raise "
                "RLGUARD_MAX_INFLIGHT_WRITES or lower RLGUARD_WRITE_THREADS"
            )
        return self

    @model_validator(mode="after")
    def _largest_body_fits_the_budget(self) -> Settings:
        largest = max(self.max_batch_bytes, self.max_request_bytes)
        if self.max_inflight_body_bytes < largest:
            raise ValueError(
                f"max_inflight_body_bytes={self.max_inflight_body_bytes} is below the largest "
                f"body one request may send ({largest} bytes), which could then never be "
                "accepted; raise RLGUARD_MAX_INFLIGHT_BODY_BYTES or lower "
                "RLGUARD_MAX_BATCH_BYTES / RLGUARD_MAX_REQUEST_BYTES"
            )
        return self

    @model_validator(mode="after")
    def _proxy_trust_is_whole(self) -> Settings:
        if bool(self.identity_header.strip()) != bool(self.trusted_proxies.strip()):
            raise ValueError(
                "RLGUARD_IDENTITY_HEADER and RLGUARD_TRUSTED_PROXIES go together: the header is "
                "trusted only from the proxy's addresses; set both, or neither"
            )
        self.proxy_networks  # noqa: B018 (a bad address fails at start, not per request)
        return self

    @property
    def proxy_networks(self) -> tuple[IPv4Network | IPv6Network, ...]:
        """The networks ``trusted_proxies`` names."""
        try:
            return tuple(
                ip_network(part.strip(), strict=False)
                for part in self.trusted_proxies.split(",")
                if part.strip()
            )
        except ValueError as exc:
            raise ValueError(f"RLGUARD_TRUSTED_PROXIES: {exc}") from exc

    @field_validator("public_url")
    @classmethod
    def _public_url_is_http(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        if value and not value.startswith(("http://", "https://")):
            raise ValueError(
                f"RLGUARD_PUBLIC_URL={value!r} is not an http(s) address; set it to where "
                "readers open the dashboard, e.g. https://rlguard.example.com"
            )
        return value

    @field_validator("database_url")
    @classmethod
    def _default_sqlite(cls, value: str) -> str:
        if value.strip():
            return value.strip()
        return f"sqlite:///{DEFAULT_DATA_DIR / 'rlguard.db'}"

    @property
    def db_pool_size(self) -> int:
        """Connections one process opens: one per thread that may ask, so none waits for one."""
        return self.read_threads + self.write_threads + BACKGROUND_CONNECTIONS

    @property
    def is_sqlite(self) -> bool:
        """True when the database is a SQLite file (WAL, write lock, checkpointer)."""
        return self.database_url.startswith("sqlite")
