"""``rlguard token create | list | revoke``: the token store, on the database directly.

The first admin token cannot come from the API (it needs one), so this talks to the database
named by ``--database-url`` or ``RLGUARD_DATABASE_URL``, upgrading its schema first.
"""

from __future__ import annotations

import argparse
import sys

from sqlalchemy import select

from rlguard_backend.core import auth, migrate
from rlguard_backend.core.config import Settings
from rlguard_backend.core.db import make_engine, make_session_factory, write_session
from rlguard_backend.models import ApiToken


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The actions and options of ``rlguard token``."""
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="issue a token and print it (shown once)")
    create.add_argument("--name", required=True, help="who or what holds it, e.g. 'ci-trainers'")
    create.add_argument("--scope", required=True, choices=[s.name for s in auth.Scope])
    create.add_argument(
        "--project", default=None, help="limit the token to this project's runs and alerts"
    )
    actions.add_parser("list", help="the tokens, without their secrets")
    revoke = actions.add_parser("revoke", help="revoke a token by its id")
    revoke.add_argument("token_id", type=int)
    for sub in actions.choices.values():
        sub.add_argument("--database-url", default=None, help="default: RLGUARD_DATABASE_URL")


def run(args: argparse.Namespace) -> int:
    """Run ``rlguard token create | list | revoke`` on the database; the exit status."""
    settings = Settings(**({"database_url": args.database_url} if args.database_url else {}))
    engine = make_engine(settings.database_url)
    try:
        migrate.upgrade(engine)
        factory = make_session_factory(engine)
        with write_session(factory) as session:
            if args.action == "create":
                _, secret = auth.issue(session, args.name, auth.Scope[args.scope], args.project)
                session.commit()
                print(secret)
                print("shown once: store it now (e.g. as RLGUARD_TOKEN)", file=sys.stderr)
                return 0
            if args.action == "revoke":
                if auth.revoke(session, args.token_id) is None:
                    print(f"rlguard token: no token {args.token_id}", file=sys.stderr)
                    return 1
                session.commit()
                print(f"revoked token {args.token_id}")
                return 0
            for token in session.scalars(select(ApiToken).order_by(ApiToken.id)):
                state = "revoked" if token.revoked_at else "active"
                print(f"{token.id}\t{token.name}\t{token.scope}\t{token.project or '-'}\t{state}")
            return 0
    finally:
        engine.dispose()
