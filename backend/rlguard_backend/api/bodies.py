"""What the two batch endpoints (points, samples) share: the bounded body read, the documented
request body, and the duplicate-batch race."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from rlguard_backend import ingest
from rlguard_backend.core.db import write_session
from rlguard_backend.core.errors import PayloadTooLarge

T = TypeVar("T")


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The raw body, refused (413) as soon as it passes ``max_bytes``, declared or not."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLarge(
            f"body of {declared} bytes exceeds the limit of {max_bytes}; send smaller batches"
        )
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise PayloadTooLarge(
                f"body exceeds the limit of {max_bytes} bytes; send smaller batches"
            )
        chunks.append(chunk)
    return b"".join(chunks)


def documented_body(
    model: type[BaseModel], example: dict[str, Any], required: bool = True
) -> dict[str, Any]:
    """``openapi_extra`` for an endpoint that reads its JSON (or gzip) body itself."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    return {
        "requestBody": {
            "required": required,
            "content": {"application/json": {"schema": schema, "example": example}},
        }
    }


def once_per_batch_id(
    factory: sessionmaker[Session],
    run_id: str,
    batch_id: str,
    store: Callable[[], T],
    replayed: Callable[[], T],
) -> T:
    """``store()``, or ``replayed()`` when a concurrent request stored the same batch id first."""
    try:
        return store()
    except IntegrityError:
        with write_session(factory) as session:
            if not ingest.batch_seen(session, run_id, batch_id):
                raise
        return replayed()


def hoist_body_definitions(document: dict[str, Any]) -> dict[str, Any]:
    """Move the ``$defs`` of documented bodies into ``components.schemas``, where their
    ``$ref``s point (so the OpenAPI document resolves, for clients and fuzzers alike)."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            content = operation.get("requestBody", {}).get("content", {})
            for media in content.values():
                schemas.update(media.get("schema", {}).pop("$defs", {}))
    return document


BOUNDS = ("maximum", "minimum", "exclusiveMaximum", "exclusiveMinimum")


def exact_integer_bounds(node: Any) -> Any:
    """Integral bounds as JSON integers: FastAPI's OpenAPI model holds them as floats, and the
    float 2^62 prints as 4.611686018427388e+18, which read as a decimal is 96 above it."""
    if isinstance(node, dict):
        return {
            key: int(value)
            if key in BOUNDS and isinstance(value, float) and value.is_integer()
            else exact_integer_bounds(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [exact_integer_bounds(item) for item in node]
    return node
