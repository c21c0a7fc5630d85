"""Serving: ``rlguard server`` (API alone), ``rlguard db``, and a uvicorn thread for embedding."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

from rlguard_backend.core.config import Settings

log = logging.getLogger("rlguard_backend")
STARTUP_TIMEOUT_S = 60.0


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind first so ``port=0`` yields a real port we can print before serving."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)  # connections made after "listening" is printed wait instead of failing
    sock.set_inheritable(True)
    return sock


def base_url(sock: socket.socket) -> str:
    """The URL a listening socket answers on (IPv6 hosts bracketed)."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


class ServerThread:
    """A real uvicorn server for an ASGI app in a background thread (tests, demo, benchmarks).

    >>> with ServerThread(app) as server:   # doctest: +SKIP
    ...     httpx.get(server.url + "/api/v1/health")
    """

    def __init__(
        self, app: Any, host: str = "127.0.0.1", port: int = 0, sock: socket.socket | None = None
    ) -> None:
        self.app = app
        self.sock = sock or bind_socket(host, port)
        self.url = base_url(self.sock)
        settings = getattr(getattr(app, "state", None), "settings", None) or Settings()
        config = uvicorn_config(app, settings, lifespan="on", timeout_graceful_shutdown=5)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._serve, name="rlguard-uvicorn", daemon=True)

    def _serve(self) -> None:
        self.server.run(sockets=[self.sock])

    def start(self) -> ServerThread:
        """Start uvicorn and wait until it accepts connections (RuntimeError if it cannot)."""
        self.thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start on {self.url}")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Ask uvicorn to exit and wait for it (bounded)."""
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def uvicorn_config(app: Any, settings: Settings, **options: Any) -> uvicorn.Config:
    """uvicorn serving ``app`` with the connection limits of ``settings`` (limits.py)."""
    from rlguard_backend.core.limits import protocol_for

    # proxy_headers off: the client address stays the TCP peer, which is what an SSO proxy's
    # identity header is trusted by (X-Forwarded-For would let any client name another peer).
    return uvicorn.Config(
        app,
        http=protocol_for(settings),
        timeout_keep_alive=settings.keep_alive_timeout_s,
        log_level="warning",
        proxy_headers=False,
        **options,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``rlguard server`` and ``rlguard db``."""
    command = parser.prog.split()[-1]
    if command == "db":
        parser.add_argument("action", choices=["upgrade", "downgrade", "current", "backup"])
        parser.add_argument(
            "revision", nargs="?", default=None, help="default: head / base; backup: the file"
        )
        parser.add_argument("--database-url", default=None, help="default: RLGUARD_DATABASE_URL")
        return
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--database-url", default=None, help="default: RLGUARD_DATABASE_URL")


def _settings(args: argparse.Namespace) -> Settings:
    overrides = {"database_url": args.database_url} if args.database_url else {}
    return Settings(**overrides)


def settings_for_host(settings: Settings, host: str) -> Settings:
    """Settings with ``auth`` decided for the address served: off only on loopback."""
    from rlguard_backend.core.auth import is_loopback

    loopback = is_loopback(host)
    if settings.auth == "off" and not loopback:
        raise SystemExit(
            f"rlguard: refusing to serve {host} without API tokens (RLGUARD_AUTH=off): anyone "
            "who reaches the port could read and write every run; bind 127.0.0.1, or drop "
            "RLGUARD_AUTH=off and create tokens with `rlguard token create`"
        )
    required = settings.auth == "on" or (settings.auth == "auto" and not loopback)
    return settings.model_copy(update={"auth": "on" if required else "off"})


def announce_auth(app: Any, host: str) -> None:
    """Say at start-up whether tokens are required; refuse to serve an empty token store."""
    if not app.state.auth_required:
        print(f"rlguard: auth off (loopback {host}): no token needed", flush=True)
        return
    from rlguard_backend.core import auth

    with app.state.session_factory() as session:
        active = auth.active_tokens(session)
    if not active:
        raise SystemExit(
            "rlguard: auth is on and the token store holds no active token, so nobody could "
            "use this service; create one first: rlguard token create --name admin --scope admin"
        )
    print(f"rlguard: auth on: {active} active token(s); send Authorization: Bearer", flush=True)


def serve_socket(app: Any, sock: socket.socket, settings: Settings) -> int:
    """Serve ``app`` on a bound socket until SIGTERM or Ctrl-C, then stop within a bound.

    Requests in flight get ``settings.shutdown_timeout_s`` to finish. uvicorn then raises the
    signal it caught again, so SIGTERM ends the process as SIGTERM does; after Ctrl-C, a worker
    thread still inside the database (a lock held from outside this process) is left behind:
    its transaction was never committed, so nothing acknowledged is lost.
    """
    shutdown_timeout_s = settings.shutdown_timeout_s
    config = uvicorn_config(
        app, settings, timeout_graceful_shutdown=max(1, round(shutdown_timeout_s))
    )
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:
        log.info("interrupted; stopped")
    _exit_past_busy_threads(time.monotonic() + shutdown_timeout_s)
    return 0


def _exit_past_busy_threads(deadline: float) -> None:
    busy = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    for thread in busy:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    stuck = [t.name for t in busy if t.is_alive()]
    if stuck:
        log.warning("stopping with %d worker thread(s) still busy: %s", len(stuck), stuck)
        logging.shutdown()
        sys.stdout.flush()
        os._exit(0)


def run(args: argparse.Namespace) -> int:
    """Run ``rlguard server`` or ``rlguard db``; the exit status."""
    from rlguard_backend.core import requestlog

    settings = _settings(args)
    requestlog.configure(settings.log_format)
    if args.command == "db":
        return _run_db(args, settings)
    from rlguard_backend.core.app import create_app

    settings = settings_for_host(settings, args.host)
    sock = bind_socket(args.host, args.port)
    app = create_app(settings)
    announce_auth(app, args.host)
    print(f"rlguard listening on {base_url(sock)} (API at /api, docs at /docs)", flush=True)
    return serve_socket(app, sock, settings)


def _run_db(args: argparse.Namespace, settings: Settings) -> int:
    from alembic import command

    from rlguard_backend.core import migrate
    from rlguard_backend.core.db import make_engine

    if args.action == "backup":
        return _backup(settings.database_url, args.revision)
    engine = make_engine(settings.database_url)
    if args.action == "upgrade":
        migrate.upgrade(engine, args.revision or "head")
    elif args.action == "downgrade":
        migrate.downgrade(engine, args.revision or "base")
    else:
        with engine.begin() as connection:
            config = migrate.alembic_config()
            config.attributes["connection"] = connection
            command.current(config)
    print(f"rlguard db {args.action}: done ({settings.database_url})", file=sys.stderr)
    return 0


def _backup(database_url: str, target: str | None) -> int:
    """An online copy of the SQLite file, consistent while the service keeps writing."""
    from rlguard_backend.core.db import backup_sqlite

    if not database_url.startswith("sqlite"):
        print(
            "rlguard db backup copies the SQLite default; for PostgreSQL use its own tools, "
            "e.g. pg_dump --format=custom (or continuous archiving for point-in-time recovery)",
            file=sys.stderr,
        )
        return 2
    if not target:
        print("rlguard db backup needs a target file: rlguard db backup rlguard-backup.db")
        return 2
    pages = backup_sqlite(database_url, Path(target))
    print(f"rlguard db backup: {pages} page(s) copied to {target}", file=sys.stderr)
    return 0
