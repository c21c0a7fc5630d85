"""``rlguard mcp``: the MCP tools over stdio for a coding agent, against a service's REST API.

claude mcp add rlguard -- rlguard mcp --url http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import os
import urllib.parse

DEFAULT_URL = "http://127.0.0.1:8000"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command line of ``rlguard mcp``: which service, with which token."""
    parser.add_argument(
        "--url",
        default=os.environ.get("RLGUARD_URL", DEFAULT_URL),
        help=f"the service's root URL (default: RLGUARD_URL or {DEFAULT_URL})",
    )
    parser.add_argument(
        "--token",
        default=os.environ.get("RLGUARD_TOKEN"),
        help="an API token (default: RLGUARD_TOKEN); read scope, write for stop_run",
    )
    parser.add_argument(
        "--public-url",
        default=os.environ.get("RLGUARD_PUBLIC_URL"),
        help="where readers open the dashboard, for the run links in answers "
        "(default: RLGUARD_PUBLIC_URL, else --url, where `rlguard up` serves it)",
    )


def run(args: argparse.Namespace) -> int:
    """Serve the tools on stdin/stdout until the agent closes them; the exit status."""
    url = _http_url("--url", args.url)
    public_url = _http_url("--public-url", args.public_url) if args.public_url else url
    try:
        import anyio

        from rlguard_backend.mcp.rest import Service
        from rlguard_backend.mcp.server import build_server
    except ImportError as exc:
        raise SystemExit(f"rlguard mcp: {exc}; pip install 'rlguard[mcp]'") from exc
    server = build_server(Service(url, token=args.token or None, public_url=public_url))
    anyio.run(server.run_stdio_async)
    return 0


def _http_url(option: str, given: str) -> str:
    url = given.rstrip("/")
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise SystemExit(f"rlguard mcp: {option} {given!r} must look like {DEFAULT_URL}")
    return url
