"""The dashboard as an ASGI app: gzip, fixed files compressed once, files sent in large blocks.

``rlguard_compose`` mounts it for ``rlguard up`` and serves it alone for ``rlguard dashboard``.
"""

from __future__ import annotations

import gzip
from typing import IO, Any

import flask
from a2wsgi import WSGIMiddleware
from a2wsgi.wsgi_typing import Environ, IterableChunks, StartResponse
from dash.fingerprint import check_fingerprint
from starlette.middleware.gzip import GZipMiddleware
from werkzeug.wsgi import FileWrapper

# a2wsgi hands each body chunk to the event loop and waits for it; Flask sends files in 8 KiB
# blocks, so the 1.2 MB plotly.js asset took ~150 round trips (~4× slower to serve).
FILE_BLOCK_BYTES = 1 << 20
# gzip level 5: ~3× smaller scripts and layouts (1.2 MB plotly.js → 0.4 MB) for ~25 ms of CPU
GZIP_LEVEL = 5
GZIP_MIN_BYTES = 1024
# Fixed files (the packages' scripts, plotly.js) are gzip'd once per process, at a higher level:
# compressed on each request they cost the server ~0.1 s of CPU per page opened, while the
# browser evaluates plotly.js on the same cores.
FIXED_FILE_ROUTES = ("_dash-component-suites/", "_rlguard/")
FIXED_GZIP_LEVEL = 6
# Files kept compressed: a page uses ~20; past this many, a file is compressed per request
# (those routes answer without sign-in, so nothing a client sends may grow the cache for good).
MAX_FIXED_FILES = 64


def dashboard_asgi(dash_app: Any) -> Any:
    """The dashboard's Flask server as an ASGI app: gzip, files sent in few large blocks."""
    server = dash_app.server
    _compress_fixed_files_once(server)

    def large_blocks(file: IO[bytes], _block_size: int = 0) -> FileWrapper:
        return FileWrapper(file, FILE_BLOCK_BYTES)

    def app(environ: Environ, start_response: StartResponse) -> IterableChunks:
        environ["wsgi.file_wrapper"] = large_blocks  # type: ignore[typeddict-unknown-key]
        return server(environ, start_response)

    asgi: Any = WSGIMiddleware(app)  # a2wsgi's ASGI types are narrower than Starlette's
    return GZipMiddleware(asgi, minimum_size=GZIP_MIN_BYTES, compresslevel=GZIP_LEVEL)


def _compress_fixed_files_once(server: flask.Flask) -> None:
    """Answer requests for fixed files with their gzip made on the first request (the gzip
    middleware passes a response that is already encoded)."""
    packed: dict[str, bytes] = {}  # path without Dash's cache-busting fingerprint -> gzip

    @server.after_request
    def compressed(response: flask.Response) -> flask.Response:
        request = flask.request
        if (
            response.status_code != 200
            or response.direct_passthrough
            or not any(route in request.path for route in FIXED_FILE_ROUTES)
            or "gzip" not in request.headers.get("Accept-Encoding", "")
        ):
            return response
        # Dash answers a script under any fingerprint (``x.v1_2m3.js``): one entry per file.
        path, _ = check_fingerprint(request.path)
        body = packed.get(path)
        if body is None:
            raw = response.get_data()
            if len(raw) < GZIP_MIN_BYTES:
                return response
            body = gzip.compress(raw, FIXED_GZIP_LEVEL)
            if len(packed) < MAX_FIXED_FILES:
                packed[path] = body
        response.set_data(body)
        response.headers["Content-Encoding"] = "gzip"
        response.headers["Vary"] = "Accept-Encoding"
        return response
