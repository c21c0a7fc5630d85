"""Serving: ``rlguard up`` (API and dashboard on one port) and ``rlguard dashboard --api URL``."""

from __future__ import annotations

import argparse
import os
from typing import IO, Any

from a2wsgi import WSGIMiddleware
from a2wsgi.wsgi_typing import Environ, IterableChunks, StartResponse
from fastapi.responses import JSONResponse
from starlette.middleware.gzip import GZipMiddleware
from werkzeug.wsgi import FileWrapper

from rlguard_backend.api.deps import PUBLIC
from rlguard_frontend.app import create_dash_app
from rlguard_frontend.signin import ProxyTrust

API_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]
# a2wsgi hands each body chunk to the event loop and waits for it; Flask sends files in 8 KiB
# blocks, so the 1.2 MB plotly.js asset took ~150 round trips (~4× slower to serve).
FILE_BLOCK_BYTES = 1 << 20
# gzip level 5: ~3× smaller scripts and layouts (1.2 MB plotly.js → 0.4 MB) for ~25 ms of CPU
GZIP_LEVEL = 5
GZIP_MIN_BYTES = 1024


def dashboard_asgi(dash_app: Any) -> Any:
    """The dashboard's Flask server as an ASGI app: gzip, files sent in few large blocks."""
    server = dash_app.server

    def large_blocks(file: IO[bytes], _block_size: int = 0) -> FileWrapper:
        return FileWrapper(file, FILE_BLOCK_BYTES)

    def app(environ: Environ, start_response: StartResponse) -> IterableChunks:
        environ["wsgi.file_wrapper"] = large_blocks  # type: ignore[typeddict-unknown-key]
        return server(environ, start_response)

    asgi: Any = WSGIMiddleware(app)  # a2wsgi's ASGI types are narrower than Starlette's
    return GZipMiddleware(asgi, minimum_size=GZIP_MIN_BYTES, compresslevel=GZIP_LEVEL)


def proxy_trust(settings: Any) -> ProxyTrust | None:
    """The SSO proxy the settings trust, or None (viewers sign in with a token)."""
    if not settings.identity_header:
        return None
    return ProxyTrust(settings.identity_header, settings.proxy_networks)


def combined_app(settings: Any, public_url: str) -> Any:
    """The API under ``/api`` and the dashboard at ``/`` in one ASGI app."""
    from rlguard_backend.main import create_app

    app = create_app(settings)

    # Unknown API paths answer JSON 404 instead of falling through to the dashboard's index.
    @app.api_route(
        f"{settings.api_prefix}/{{path:path}}",
        methods=API_METHODS,
        include_in_schema=False,
        dependencies=[PUBLIC],
    )
    def unknown_api_path(path: str) -> JSONResponse:
        return JSONResponse({"detail": f"no API endpoint {settings.api_prefix}/{path}"}, 404)

    dash_app = create_dash_app(
        f"{public_url}{settings.api_prefix}",
        sign_in=app.state.auth_required,
        token=os.environ.get("RLGUARD_TOKEN"),
        trust=proxy_trust(settings),
    )
    app.mount("/", dashboard_asgi(dash_app))
    return app


def start_background(host: str = "127.0.0.1", port: int = 0, settings: Any = None) -> Any:
    """Start API + dashboard in a thread; returns the running ``ServerThread`` (``.url``)."""
    from rlguard_backend.config import Settings
    from rlguard_backend.serve import ServerThread, base_url, bind_socket

    settings = settings or Settings()
    sock = bind_socket(host, port)
    return ServerThread(combined_app(settings, base_url(sock)), sock=sock).start()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    if parser.prog.split()[-1] == "dashboard":
        parser.add_argument("--api", required=True, help="API base, e.g. http://backend:8000/api")
    else:
        parser.add_argument("--database-url", default=None, help="default: RLGUARD_DATABASE_URL")


def run(args: argparse.Namespace) -> int:
    from rlguard_backend import requestlog
    from rlguard_backend.config import Settings
    from rlguard_backend.serve import (
        announce_auth,
        base_url,
        bind_socket,
        serve_socket,
        settings_for_host,
    )

    database_url = getattr(args, "database_url", None)
    settings = settings_for_host(
        Settings(**({"database_url": database_url} if database_url else {})), args.host
    )
    requestlog.configure(settings.log_format)
    sock = bind_socket(args.host, args.port)
    url = base_url(sock)
    if args.command == "dashboard":
        from rlguard_backend.auth import is_loopback

        # Off loopback, viewers sign in; on it, the dashboard may use a token of its own.
        dash_app = create_dash_app(
            args.api,
            sign_in=not is_loopback(args.host),
            token=os.environ.get("RLGUARD_TOKEN"),
            trust=proxy_trust(settings),
        )
        app: Any = dashboard_asgi(dash_app)
        print(f"rlguard dashboard on {url}/ reading {args.api}", flush=True)
    else:
        app = combined_app(settings, url)
        announce_auth(app, args.host)
        print(
            f"rlguard listening on {url} (dashboard at /, API at /api, docs at /docs)", flush=True
        )
    return serve_socket(app, sock, settings)
