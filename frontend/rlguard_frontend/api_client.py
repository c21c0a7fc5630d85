"""A thin HTTP client for the REST API, parsing answers with the backend's wire schemas."""

from __future__ import annotations

from typing import Any

import httpx

from rlguard_backend.schemas import RunList

TIMEOUT_S = 10.0


class ApiError(Exception):
    """The API answered with an error or could not be reached; ``str()`` is for the page."""


class ApiClient:
    """Talks to ``{api_url}/v1/...``; one pooled connection per dashboard process."""

    def __init__(self, api_url: str) -> None:
        self.api_url = api_url.rstrip("/")
        self._http = httpx.Client(base_url=self.api_url, timeout=TIMEOUT_S)

    def __repr__(self) -> str:
        return f"ApiClient({self.api_url!r})"

    def _get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        clean = {k: v for k, v in (params or {}).items() if v not in (None, "")}
        try:
            response = self._http.get(path, params=clean)
        except httpx.HTTPError as exc:
            raise ApiError(f"cannot reach the rlguard API at {self.api_url}: {exc}") from exc
        if response.status_code >= 400:
            raise ApiError(f"API {path} answered {response.status_code}: {response.text[:300]}")
        return response.json()

    def list_runs(
        self, project: str | None = None, status: str | None = None, limit: int = 500
    ) -> RunList:
        data = self._get("/v1/runs", {"project": project, "status": status, "limit": limit})
        return RunList.model_validate(data)
