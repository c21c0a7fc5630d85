"""API tokens: scopes, issuing, hashing and checking.

A token reads ``rlg_<lookup>_<secret>``: ``lookup`` (8 hex digits) finds its row, ``secret`` is
32 random bytes that only its holder has. The database keeps a per-token salt and the SHA-256 of
salt and secret; a high-entropy secret needs no slow hash (nothing to brute-force), and the salt
keeps equal secrets from matching rows. Checks compare digests in constant time.

Scopes are ordered: ``admin`` may do what ``write`` may, ``write`` what ``read`` may.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import ipaddress
import re
import secrets
import threading
import time
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from rlguard_backend.models import ApiToken, utcnow

TOKEN_PATTERN = re.compile(r"^rlg_([0-9a-f]{8})_([A-Za-z0-9_-]{43})$")
CACHE_TTL_S = 5.0  # how long a process trusts a checked token; revocation elsewhere waits this


class Scope(enum.IntEnum):
    read = 1
    write = 2
    admin = 3


@dataclass(frozen=True)
class Identity:
    """Who a request is: a token's id, name, scope and (optional) project."""

    token_id: int | None
    name: str
    scope: Scope
    project: str | None = None


LOCAL = Identity(None, "local (auth off)", Scope.admin)


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``: addresses no other machine can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _digest(salt: str, secret: str) -> str:
    return hashlib.sha256(f"{salt}:{secret}".encode()).hexdigest()


def issue(
    session: Session, name: str, scope: Scope, project: str | None = None
) -> tuple[ApiToken, str]:
    """Store a new token; returns its row and the token, the only time its secret is seen."""
    lookup = secrets.token_hex(4)
    while session.scalar(select(ApiToken.id).where(ApiToken.lookup == lookup)) is not None:
        lookup = secrets.token_hex(4)
    secret, salt = secrets.token_urlsafe(32), secrets.token_hex(16)
    token = ApiToken(
        name=name,
        lookup=lookup,
        salt=salt,
        token_hash=_digest(salt, secret),
        scope=scope.name,
        project=project,
        created_at=utcnow(),
    )
    session.add(token)
    session.flush()
    return token, f"rlg_{lookup}_{secret}"


def revoke(session: Session, token_id: int) -> ApiToken | None:
    """Mark a token revoked (kept for the record); None when there is no such token."""
    token = session.get(ApiToken, token_id)
    if token is not None and token.revoked_at is None:
        token.revoked_at = utcnow()
    return token


def active_tokens(session: Session) -> int:
    """How many tokens are not revoked (the service will not start off loopback with 0)."""
    return len(session.scalars(select(ApiToken.id).where(ApiToken.revoked_at.is_(None))).all())


def check(session: Session, presented: str) -> Identity | None:
    """The identity of an active token, or None for anything else (malformed, unknown, revoked)."""
    match = TOKEN_PATTERN.match(presented)
    if match is None:
        return None
    lookup, secret = match.groups()
    token = session.scalar(select(ApiToken).where(ApiToken.lookup == lookup))
    if token is None or token.revoked_at is not None:
        return None
    if not hmac.compare_digest(token.token_hash, _digest(token.salt, secret)):
        return None
    return Identity(token.id, token.name, Scope[token.scope], token.project)


class TokenCache:
    """Checked tokens of this process for CACHE_TTL_S, so a hook's batches skip the lookup."""

    def __init__(self, ttl_s: float = CACHE_TTL_S) -> None:
        self.ttl_s = ttl_s
        self._entries: dict[str, tuple[float, Identity]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(presented: str) -> str:
        return hashlib.sha256(presented.encode()).hexdigest()

    def get(self, presented: str) -> Identity | None:
        """The cached identity of a presented token, None when unknown or expired."""
        with self._lock:
            entry = self._entries.get(self._key(presented))
        if entry is None or entry[0] < time.monotonic():
            return None
        return entry[1]

    def put(self, presented: str, identity: Identity) -> None:
        """Remember a checked token for ``ttl_s`` (the cache empties past 10,000 entries)."""
        with self._lock:
            if len(self._entries) > 10_000:
                self._entries.clear()
            self._entries[self._key(presented)] = (time.monotonic() + self.ttl_s, identity)

    def forget(self, token_id: int) -> None:
        """Drop a revoked token at once, so this process refuses it from now on."""
        with self._lock:
            self._entries = {k: v for k, v in self._entries.items() if v[1].token_id != token_id}
