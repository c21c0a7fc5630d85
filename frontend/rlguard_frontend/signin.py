"""Sign-in for a dashboard the API guards with tokens: a viewer pastes a read token once.

The token is checked against the API, then kept in an HttpOnly, SameSite=Strict cookie: page
scripts cannot read it, and no other site's page can make the browser send it, which keeps the
state-changing callbacks (acknowledge, resolve) safe from cross-site requests. Every request
but the sign-in page and the static files needs the cookie; its token then goes with the
request's API calls (``api_client.REQUEST_TOKEN``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from ipaddress import IPv4Network, IPv6Network, ip_address
from typing import Any
from urllib.parse import quote, urlsplit

import flask
from markupsafe import escape

from rlguard_frontend.api_client import REQUEST_TOKEN, REQUEST_VIEWER, ApiClient, ApiError

logger = logging.getLogger(__name__)

COOKIE = "rlguard_session"
OPEN_PREFIXES = ("/assets/", "/_dash-component-suites/", "/_favicon.ico", "/_rlguard/")

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>rlguard · sign in</title>
<style>
body {{ font-family: system-ui, sans-serif; display: grid; place-items: center;
       min-height: 90vh; background: #f6f7f9; color: #1d2330; }}
form {{ background: #fff; padding: 2rem; border-radius: 8px; width: 26rem;
       box-shadow: 0 1px 4px rgba(0,0,0,.12); }}
input {{ width: 100%; padding: .5rem; margin: .75rem 0; font-family: monospace; }}
.error {{ color: #b42318; }}
</style></head>
<body><form method="post" action="{action}">
<h1>rlguard</h1>
<p>This service needs an API token. Paste one with at least the <b>read</b> scope
(an admin creates it with <code>rlguard token create --scope read</code>).</p>
<input type="password" name="token" id="token" placeholder="rlg_…" autofocus required>
<input type="hidden" name="next" value="{next}">
<p class="error" id="error">{error}</p>
<button type="submit" id="sign-in">Sign in</button>
</form></body></html>"""


def safe_next(target: str | None, prefix: str) -> str:
    """Where to go after signing in: a path of this dashboard, never another site."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return prefix
    return target


@dataclass(frozen=True)
class ProxyTrust:
    """An SSO proxy in front: the identity ``header`` it sets, trusted from ``networks`` only."""

    header: str
    networks: tuple[IPv4Network | IPv6Network, ...]

    def viewer(self, remote_addr: str | None, headers: Any) -> str | None:
        """The user the proxy signed in, or None (no header, or not sent by the proxy)."""
        user = (headers.get(self.header) or "").strip()
        if not user:
            return None
        try:
            peer = ip_address(remote_addr or "")
        except ValueError:
            return None
        if any(peer in network for network in self.networks):
            return user
        logger.warning("ignored %s from %s: not a trusted proxy address", self.header, peer)
        return None


def install(
    server: flask.Flask, client: ApiClient, prefix: str = "/", trust: ProxyTrust | None = None
) -> None:
    """Guard every route of the dashboard's Flask ``server`` behind the sign-in cookie (or the
    SSO proxy's identity header, when ``trust`` names one)."""
    if trust is not None and not client.token:
        raise ValueError(
            "a dashboard behind an SSO proxy calls the API with a token of its own: set "
            "RLGUARD_TOKEN (a write token lets its viewers acknowledge and resolve alerts)"
        )
    login, logout = f"{prefix}login", f"{prefix}logout"
    open_paths = tuple(prefix + p.lstrip("/") for p in OPEN_PREFIXES)

    def page(error: str = "", next_path: str = "") -> str:
        return PAGE.format(action=escape(login), next=escape(next_path), error=escape(error))

    @server.before_request
    def require_sign_in() -> Any:
        REQUEST_TOKEN.set(None)  # a worker thread serves many viewers: never reuse a token
        REQUEST_VIEWER.set(None)
        request = flask.request
        if request.method == "POST" and not same_origin(request):
            return flask.jsonify(detail="cross-site request refused"), 403
        if request.path in (login, logout) or request.path.startswith(open_paths):
            return None
        viewer = trust.viewer(request.remote_addr, request.headers) if trust else None
        if viewer:  # the API calls carry the dashboard's own token; commands name the viewer
            REQUEST_VIEWER.set(viewer)
            return None
        token = request.cookies.get(COOKIE)
        if not token:
            if request.method == "GET":
                return flask.redirect(f"{login}?next={quote(request.full_path.rstrip('?'))}")
            return flask.jsonify(detail="sign in first"), 401
        REQUEST_TOKEN.set(token)
        return None

    @server.get(login)
    def show_sign_in() -> str:
        return page(next_path=safe_next(flask.request.args.get("next"), prefix))

    @server.post(login)
    def sign_in() -> Any:
        token = (flask.request.form.get("token") or "").strip()
        next_path = safe_next(flask.request.form.get("next"), prefix)
        error = check_token(client, token)
        if error:
            return page(error, next_path)  # the form again, saying what to fix
        response = flask.redirect(next_path)
        response.set_cookie(
            COOKIE,
            token,
            httponly=True,
            samesite="Strict",
            secure=flask.request.is_secure,
            path=prefix,
        )
        return response

    @server.post(logout)
    def sign_out() -> Any:
        response = flask.redirect(login)
        response.delete_cookie(COOKIE, path=prefix)
        return response


def same_origin(request: flask.Request) -> bool:
    """False for a request another site's page made the browser send (its Origin says so).

    The cookie is SameSite=Strict, but an SSO proxy's own session may not be: this keeps the
    state-changing callbacks (acknowledge, resolve) safe behind one too.
    """
    origin = request.headers.get("Origin")
    if origin is None:
        return True  # no browser sends a cross-origin POST without one
    return urlsplit(origin).netloc == request.host


def check_token(client: ApiClient, token: str) -> str:
    """Empty when the API accepts ``token`` for reading, else what the viewer should do."""
    if not token:
        return "Paste a token first."
    reset = REQUEST_TOKEN.set(token)
    try:
        client.list_runs(limit=1)
    except ApiError as exc:
        if exc.status_code == 401:
            return "That token is unknown or revoked; ask an admin for a new one."
        return f"The API could not be asked ({exc})."
    finally:
        REQUEST_TOKEN.reset(reset)
    return ""
