"""A thin HTTP client for the REST API, parsing answers with the backend's wire schemas."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from rlguard_backend.schemas import (
    AlertList,
    AlertPublic,
    CommandList,
    CommandPublic,
    GroupList,
    MarkerList,
    MetricKeyList,
    PolicyList,
    PolicyPublic,
    ProjectList,
    RunFieldList,
    RunList,
    RunPublic,
    RunSeriesList,
    SampleList,
    SampleStepList,
    SeriesResponse,
    TokenAccess,
)
from rlguard_backend.schemas.webhooks import (
    WebhookCreated,
    WebhookList,
    WebhookPublic,
    WebhookTestResult,
)

TIMEOUT_S = 10.0
MAX_KNOWN_TOKENS = 256  # viewers' tokens whose scope a dashboard process remembers
MAX_POINTS = 2000
# The signed-in viewer's token for the API calls of the request being served (see signin.py).
REQUEST_TOKEN: ContextVar[str | None] = ContextVar("rlguard_request_token", default=None)
# The user an SSO proxy signed in, for the request being served: the dashboard's own token
# asks on their behalf, and the commands it sends name them (``on_behalf_of``).
REQUEST_VIEWER: ContextVar[str | None] = ContextVar("rlguard_request_viewer", default=None)
T = TypeVar("T")


def carry_token(work: Callable[..., T]) -> Callable[..., T]:
    """``work`` for a worker thread: its API calls send the token of the request that made it.

    A thread of a pool starts with no context of its own, so without this a signed-in
    viewer's reads done in parallel go out without their token (and are refused).
    """
    token = REQUEST_TOKEN.get()

    def run(*args: Any) -> T:
        reset = REQUEST_TOKEN.set(token)
        try:
            return work(*args)
        finally:  # a pooled thread never keeps one viewer's token for the next work
            REQUEST_TOKEN.reset(reset)

    return run


class ApiError(Exception):
    """The API answered with an error or could not be reached; ``str()`` is for the page,
    ``detail`` the API's own sentence (its answer's ``detail``) when it gave one."""

    def __init__(self, message: str, status_code: int | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.status_code = status_code
        self.detail = detail or message  # the API's own sentence, when it gave one


class ApiClient:
    """Talks to ``{api_url}/v1/...``; one pooled connection per dashboard process.

    Each call sends the signed-in viewer's token (``REQUEST_TOKEN``), else ``token``.
    """

    def __init__(self, api_url: str, token: str | None = None) -> None:
        self.api_url = api_url.rstrip("/")
        self.token = token
        self._http = httpx.Client(base_url=self.api_url, timeout=TIMEOUT_S)
        self._access: dict[str | None, TokenAccess] = {}

    def __repr__(self) -> str:
        return f"ApiClient({self.api_url!r})"

    def _get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        clean = {k: v for k, v in (params or {}).items() if v not in (None, "")}
        return self._send("GET", path, params=clean)

    def _send(self, method: str, path: str, **kwargs: Any) -> Any:
        token = REQUEST_TOKEN.get() or self.token
        if token:
            kwargs["headers"] = {"Authorization": f"Bearer {token}"}
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ApiError(f"cannot reach the rlguard API at {self.api_url}: {exc}") from exc
        if response.status_code >= 400:
            detail = _detail(response)
            raise ApiError(
                f"API {path} answered {response.status_code}: {detail}",
                response.status_code,
                detail,
            )
        try:
            return response.json()
        except ValueError as exc:  # an HTML page: no such API endpoint behind this URL
            raise ApiError(f"API {path} answered no JSON", 404) from exc

    def list_runs(
        self,
        project: str | None = None,
        status: str | None = None,
        tag: str | None = None,
        limit: int = 500,
        *,
        offset: int = 0,
        sort: Sequence[str] = (),
        filters: Sequence[str] = (),
        fields: Sequence[str] = (),
    ) -> RunList:
        """A page of runs; ``sort``/``filters``/``fields`` name the API's run fields."""
        params = {
            "project": project,
            "status": status,
            "tag": tag,
            "limit": limit,
            "offset": offset or None,
            "sort": ",".join(sort),
            "filter": list(filters) or None,
            "fields": ",".join(fields),
        }
        return RunList.model_validate(self._get("/v1/runs", params))

    def read_groups(
        self,
        run_ids: Sequence[str],
        signals: Sequence[str],
        *,
        by: Sequence[str] = (),
        smoothing: float = 0.0,
        bins: int = 500,
        from_step: int | None = None,
        to_step: int | None = None,
    ) -> GroupList:
        """The runs grouped by the ``by`` fields, each group's bands per signal."""
        params = {
            "runs": ",".join(run_ids),
            "signals": ",".join(signals),
            "by": ",".join(by),
            "smoothing": smoothing or None,
            "bins": bins,
            "from_step": from_step,
            "to_step": to_step,
        }
        return GroupList.model_validate(self._get("/v1/groups", params))

    def list_run_fields(self, project: str | None = None) -> RunFieldList:
        """The fields runs can be sorted and filtered by, of one project or all."""
        return RunFieldList.model_validate(self._get("/v1/run-fields", {"project": project}))

    def list_projects(self) -> ProjectList:
        """The projects that hold runs."""
        return ProjectList.model_validate(self._get("/v1/projects"))

    def get_run(self, run: str) -> RunPublic:
        """One run's metadata, the run named by its id, its name or ``project/name``."""
        project, _, name = run.partition("/") if "/" in run else (None, "", run)
        path = f"/v1/runs/{quote(name, safe='')}"
        return RunPublic.model_validate(self._get(path, {"project": project}))

    def run_markers(self, run_id: str) -> MarkerList:
        """Restarts, rewinds and learning-rate changes; an API without them yields none."""
        try:
            return MarkerList.model_validate(self._get(f"/v1/runs/{run_id}/markers"))
        except ApiError as exc:
            if exc.status_code in (404, 405):
                return MarkerList(data=[], count=0)
            raise

    def list_keys(self, run_id: str) -> MetricKeyList:
        """The run's metric keys with their point counts and step ranges."""
        return MetricKeyList.model_validate(self._get(f"/v1/runs/{run_id}/keys"))

    def read_series(
        self,
        run_id: str,
        keys: Sequence[str],
        *,
        from_step: int | None = None,
        to_step: int | None = None,
        after_step: int | None = None,
        max_points: int = MAX_POINTS,
        smoothing: float = 0.0,
        times: bool = True,
    ) -> SeriesResponse:
        """Several keys in one request; ``times=False`` when the x axis is steps (much cheaper)."""
        params = _series_params(from_step, to_step, max_points, smoothing, times)
        params.update(keys=",".join(keys), after_step=after_step)
        return SeriesResponse.model_validate(self._get(f"/v1/runs/{run_id}/series", params))

    def read_runs_series(
        self,
        run_ids: Sequence[str],
        signals: Sequence[str],
        *,
        from_step: int | None = None,
        to_step: int | None = None,
        max_points: int = MAX_POINTS,
        smoothing: float = 0.0,
        times: bool = True,
    ) -> RunSeriesList:
        """Several runs in one request, each with its first key's series of each signal."""
        params = _series_params(from_step, to_step, max_points, smoothing, times)
        params.update(runs=",".join(run_ids), signals=",".join(signals))
        return RunSeriesList.model_validate(self._get("/v1/series", params))

    def list_alerts(self, run_id: str | None = None, status: str | None = None) -> AlertList:
        """Alerts of one run or of all runs; an API without alert endpoints yields none."""
        path = f"/v1/runs/{run_id}/alerts" if run_id else "/v1/alerts"
        try:
            return AlertList.model_validate(self._get(path, {"status": status, "limit": 1000}))
        except ApiError as exc:
            if exc.status_code in (404, 405):
                return AlertList(data=[], count=0)
            raise

    def sample_steps(self, run_id: str) -> SampleStepList:
        """The steps of a run that hold samples."""
        return SampleStepList.model_validate(self._get(f"/v1/runs/{run_id}/sample-steps"))

    def list_samples(
        self,
        run_id: str,
        *,
        from_step: int,
        to_step: int | None,
        sort: str = "reward",
        order: str = "desc",
        limit: int = 200,
        tokens: bool = True,
        index: int | None = None,
    ) -> SampleList:
        """Samples of a step range (to the newest step when ``to_step`` is None; one ``index``
        of it, if given), sorted; with their per-token arrays unless ``tokens`` is off."""
        params: dict[str, Any] = {
            "from_step": from_step,
            "sort": sort,
            "order": order,
            "limit": limit,
            "tokens": "true" if tokens else "false",
        }
        if to_step is not None:
            params["to_step"] = to_step
        if index is not None:
            params["min_index"] = params["max_index"] = index
        return SampleList.model_validate(self._get(f"/v1/runs/{run_id}/samples", params))

    def ask_command(
        self, run_id: str, kind: str, reason: str | None = None, alert_id: int | None = None
    ) -> CommandPublic:
        """``POST /runs/{id}/stop`` or ``…/checkpoint``: ask the run's trainer, on behalf of
        the SSO user being served (``REQUEST_VIEWER``) when there is one."""
        fields = (
            ("reason", reason),
            ("alert_id", alert_id),
            ("on_behalf_of", REQUEST_VIEWER.get()),
        )
        body = {k: v for k, v in fields if v is not None}
        return CommandPublic.model_validate(
            self._send("POST", f"/v1/runs/{run_id}/{kind}", json=body)
        )

    def list_commands(self, run_id: str) -> CommandList:
        """The run's stop and checkpoint commands, oldest first."""
        return CommandList.model_validate(self._get(f"/v1/runs/{_segment(run_id)}/commands"))

    def list_policies(self, project: str) -> PolicyList:
        """The project's command policies."""
        return PolicyList.model_validate(self._get(f"/v1/projects/{_segment(project)}/policies"))

    def create_policy(self, project: str, rule: dict[str, Any]) -> PolicyPublic:
        """Add a command policy to the project."""
        path = f"/v1/projects/{_segment(project)}/policies"
        return PolicyPublic.model_validate(self._send("POST", path, json=rule))

    def delete_policy(self, project: str, policy_id: int) -> PolicyPublic:
        """Remove one of the project's policies."""
        path = f"/v1/projects/{_segment(project)}/policies/{policy_id}"
        return PolicyPublic.model_validate(self._send("DELETE", path))

    def can_write(self) -> bool:
        """Whether the viewer's token may change alerts (acknowledge, resolve); asked once per
        token. An API that cannot say (older, or away) is taken to allow it: the action then
        answers for itself."""
        token = REQUEST_TOKEN.get() or self.token
        if token not in self._access:
            try:
                access = TokenAccess.model_validate(self._get("/v1/token-access"))
            except ApiError:
                return True  # not remembered: the API may answer next time
            if len(self._access) >= MAX_KNOWN_TOKENS:
                self._access.clear()
            self._access[token] = access
        return self._access[token].scope in ("write", "admin")

    def update_alert(self, alert_id: int, change: dict[str, Any]) -> AlertPublic:
        """``{"acknowledged": true}`` or ``{"status": "resolved"}``."""
        return AlertPublic.model_validate(
            self._send("PATCH", f"/v1/alerts/{alert_id}", json=change)
        )

    def list_webhooks(self) -> WebhookList:
        """Every stored webhook (admin scope)."""
        return WebhookList.model_validate(self._get("/v1/webhooks"))

    def create_webhook(self, hook: dict[str, Any]) -> WebhookCreated:
        """Add a webhook; the answer carries its secret, this once."""
        return WebhookCreated.model_validate(self._send("POST", "/v1/webhooks", json=hook))

    def update_webhook(self, hook_id: int, change: dict[str, Any]) -> WebhookPublic:
        """Change a webhook, e.g. ``{"enabled": false}``."""
        return WebhookPublic.model_validate(
            self._send("PATCH", f"/v1/webhooks/{hook_id}", json=change)
        )

    def delete_webhook(self, hook_id: int) -> WebhookPublic:
        """Delete a webhook."""
        return WebhookPublic.model_validate(self._send("DELETE", f"/v1/webhooks/{hook_id}"))

    def test_webhook(self, hook_id: int) -> WebhookTestResult:
        """Send a webhook a test message; what its receiver answered."""
        return WebhookTestResult.model_validate(self._send("POST", f"/v1/webhooks/{hook_id}/test"))


def _segment(text: str) -> str:
    """One path segment, whatever the text holds."""
    return quote(text, safe="")


def _detail(response: httpx.Response) -> str:
    """The sentence of an error answer's ``detail`` (the first one of a 422's list), or the
    answer's first 300 characters."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):
        return str(detail[0].get("msg", ""))
    return detail if isinstance(detail, str) else response.text[:300]


def _series_params(
    from_step: int | None, to_step: int | None, max_points: int, smoothing: float, times: bool
) -> dict[str, Any]:
    """The query parameters the two series reads share (``None``: left out)."""
    return {
        "from_step": from_step,
        "to_step": to_step,
        "max_points": max_points,
        "smoothing": smoothing or None,
        "include_times": "true" if times else "false",
    }
