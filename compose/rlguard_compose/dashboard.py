"""``rlguard dashboard``: the dashboard alone, reading a remote API."""

from __future__ import annotations

import argparse
import os

from rlguard_backend.core import requestlog
from rlguard_backend.core.auth import is_loopback
from rlguard_backend.core.config import Settings
from rlguard_backend.core.serve import base_url, bind_socket, serve_socket, settings_for_host
from rlguard_compose.serve import proxy_trust
from rlguard_frontend.app import create_dash_app
from rlguard_frontend.asgi import dashboard_asgi


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``rlguard dashboard``."""
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--api", required=True, help="API base, e.g. http://backend:8000/api")


def run(args: argparse.Namespace) -> int:
    """``rlguard dashboard --api URL``: the dashboard alone, reading a remote API."""
    settings = settings_for_host(Settings(), args.host)
    requestlog.configure(settings.log_format)
    sock = bind_socket(args.host, args.port)
    # Off loopback, viewers sign in; on it, the dashboard may use a token of its own.
    dash_app = create_dash_app(
        args.api,
        sign_in=not is_loopback(args.host),
        token=os.environ.get("RLGUARD_TOKEN"),
        trust=proxy_trust(settings),
    )
    print(f"rlguard dashboard on {base_url(sock)}/ reading {args.api}", flush=True)
    return serve_socket(dashboard_asgi(dash_app), sock, settings)
