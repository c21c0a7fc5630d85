"""``rlguard up``: the API under ``/api`` and the dashboard at ``/`` in one process."""

from __future__ import annotations

import argparse
import os
from typing import Any

from fastapi.responses import JSONResponse

from rlguard_backend.api.deps import PUBLIC
from rlguard_backend.core.config import Settings
from rlguard_frontend.app import create_dash_app
from rlguard_frontend.asgi import dashboard_asgi
from rlguard_frontend.signin import ProxyTrust

API_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


def proxy_trust(settings: Settings) -> ProxyTrust | None:
    """The SSO proxy the settings trust, or None (viewers sign in with a token)."""
    if not settings.identity_header:
        return None
    return ProxyTrust(settings.identity_header, settings.proxy_networks)


def combined_app(settings: Settings, public_url: str) -> Any:
    """The API under ``settings.api_prefix`` and the dashboard at ``/`` in one ASGI app."""
    from rlguard_backend.core.app import create_app

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
    mcp = getattr(app.state, "mcp", None)  # absent without the mcp extra
    if mcp is not None and not settings.public_url:
        mcp.service.public_url = public_url  # the run pages are served right here
    return app


def start_background(
    host: str = "127.0.0.1", port: int = 0, settings: Settings | None = None
) -> Any:
    """Start API + dashboard in a thread; returns the running ``ServerThread`` (``.url``)."""
    from rlguard_backend.core.serve import ServerThread, base_url, bind_socket

    settings = settings or Settings()
    sock = bind_socket(host, port)
    return ServerThread(combined_app(settings, base_url(sock)), sock=sock).start()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command line of ``rlguard up``: where to listen and which database."""
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--database-url", default=None, help="default: RLGUARD_DATABASE_URL")


def run(args: argparse.Namespace) -> int:
    """Serve the API and the dashboard in one process until stopped; the exit status."""
    from rlguard_backend.core import requestlog
    from rlguard_backend.core.serve import (
        announce_auth,
        base_url,
        bind_socket,
        serve_socket,
        settings_for_host,
    )

    database_url = args.database_url
    settings = settings_for_host(
        Settings(**({"database_url": database_url} if database_url else {})), args.host
    )
    requestlog.configure(settings.log_format)
    sock = bind_socket(args.host, args.port)
    url = base_url(sock)
    app = combined_app(settings, url)
    announce_auth(app, args.host)
    print(f"rlguard listening on {url} (dashboard at /, API at /api, docs at /docs)", flush=True)
    return serve_socket(app, sock, settings)
