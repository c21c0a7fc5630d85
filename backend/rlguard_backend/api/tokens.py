"""API tokens (admin scope): issue, list, revoke. `rlguard token` does the same on the database."""

from __future__ import annotations

from fastapi import APIRouter, Request, status
from sqlalchemy import select
from sqlalchemy.orm import Session

from rlguard_backend.api.deps import ADMIN, READ, DatabaseDep, IdentityDep, TokenId, WriterDep
from rlguard_backend.core import auth
from rlguard_backend.core.errors import NotFound
from rlguard_backend.models import ApiToken, as_utc
from rlguard_backend.schemas import (
    ERROR_RESPONSES,
    TokenAccess,
    TokenCreate,
    TokenCreated,
    TokenList,
    TokenPublic,
)

router = APIRouter(prefix="/v1/tokens", tags=["tokens"], responses=ERROR_RESPONSES)
access_router = APIRouter(prefix="/v1/token-access", tags=["tokens"], responses=ERROR_RESPONSES)


def to_public(token: ApiToken) -> TokenPublic:
    """A token row without its secret, times in UTC."""
    public = TokenPublic.model_validate(token, from_attributes=True)
    revoked = None if token.revoked_at is None else as_utc(token.revoked_at)
    return public.model_copy(update={"created_at": as_utc(token.created_at), "revoked_at": revoked})


@router.post(
    "", response_model=TokenCreated, status_code=status.HTTP_201_CREATED, dependencies=[ADMIN]
)
async def create_token(data: TokenCreate, db: WriterDep) -> TokenCreated:
    """Issue a token; the answer carries its secret, which is never shown again."""

    def create(session: Session) -> TokenCreated:
        token, secret = auth.issue(session, data.name, auth.Scope[data.scope], data.project)
        session.commit()
        return TokenCreated(**to_public(token).model_dump(), token=secret)

    return await db.write(create)


@router.get("", response_model=TokenList, dependencies=[ADMIN])
async def list_tokens(db: DatabaseDep) -> TokenList:
    """Every token, active and revoked, without secrets."""

    def read(session: Session) -> TokenList:
        tokens = session.scalars(select(ApiToken).order_by(ApiToken.id)).all()
        return TokenList(data=[to_public(t) for t in tokens], count=len(tokens))

    return await db.read(read)


@router.delete("/{token_id}", response_model=TokenPublic, dependencies=[ADMIN])
async def revoke_token(token_id: TokenId, request: Request, db: WriterDep) -> TokenPublic:
    """Revoke a token: this process refuses it at once, others within a few seconds."""

    def revoke(session: Session) -> TokenPublic:
        token = auth.revoke(session, token_id)
        if token is None:
            raise NotFound(f"no token {token_id}; GET /api/v1/tokens lists them")
        session.commit()
        return to_public(token)

    revoked = await db.write(revoke)
    request.app.state.token_cache.forget(token_id)
    return revoked


@access_router.get("", response_model=TokenAccess, dependencies=[READ])
async def read_token_access(identity: IdentityDep) -> TokenAccess:
    """The scope and project of the token this request carries (admin, all, without auth)."""
    access = {"name": identity.name, "scope": identity.scope.name, "project": identity.project}
    return TokenAccess.model_validate(access)
