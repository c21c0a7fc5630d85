"""API tokens: every endpoint of the OpenAPI document refuses a missing, unknown or revoked token
(401) and too small a scope (403) and answers the right scope (2xx); start-up rules by address."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

import rlguard
from rlguard_backend.core import auth
from rlguard_backend.core.app import access_table, create_app
from rlguard_backend.core.config import Settings
from rlguard_backend.core.db import make_engine, make_session_factory, write_session
from rlguard_backend.core.serve import ServerThread, settings_for_host
from rlguard_backend.schemas.webhooks import WebhookCreate
from rlguard_backend.store import webhooks as webhook_store
from tests.conftest import new_run_id
from tests.hook.hookutil import child_env, wait_for

API = "/api/v1"
UNREACHABLE = "http://127.0.0.1:9/hook"
LOWER = {"write": "read", "admin": "write"}


@dataclass
class Service:
    url: str
    app: Any
    tokens: dict[str, str]  # scope -> token
    revoked: str

    def issue(self, scope: str, project: str | None = None) -> tuple[int, str]:
        with write_session(self.app.state.session_factory) as session:
            row, token = auth.issue(session, f"test-{scope}", auth.Scope[scope], project)
            session.commit()
            return row.id, token


@pytest.fixture
def service(sqlite_url: str) -> Iterator[Service]:
    yield from serve_with_tokens(sqlite_url)


def serve_with_tokens(sqlite_url: str) -> Iterator[Service]:
    """The service with auth on, a token of each scope and a revoked admin token."""
    app = create_app(Settings(database_url=sqlite_url, auth="on"))
    with ServerThread(app) as server:
        svc = Service(server.url, app, {}, "")
        svc.tokens = {scope.name: svc.issue(scope.name)[1] for scope in auth.Scope}
        revoked_id, svc.revoked = svc.issue("admin")
        with write_session(app.state.session_factory) as session:
            auth.revoke(session, revoked_id)
            session.commit()
        yield svc
    app.state.engine.dispose()


def call(svc: Service, method: str, path: str, body: Any = None, *, token: str | None) -> int:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    answer = httpx.request(method, svc.url + path, json=body, headers=headers, timeout=30)
    kinds = ("application/json", "text/csv", "text/plain")  # text/plain: Prometheus
    assert answer.headers["content-type"].startswith(kinds), path
    return answer.status_code


def fixtures(svc: Service) -> dict[str, Any]:
    """A run with points and an open alert, made with the admin token."""
    run_id = new_run_id("auth")
    admin = {"Authorization": f"Bearer {svc.tokens['admin']}"}
    http = httpx.Client(base_url=svc.url + API, headers=admin, timeout=30)
    assert http.post("/runs", json={"id": run_id, "project": "auth"}).status_code == 201
    steps = [{"step": s, "values": {"actor/entropy": "NaN"}} for s in range(20)]
    ack = http.post(f"/runs/{run_id}/batches", json={"batch_id": "nan", "steps": steps}).json()
    assert ack["alerts"], "a NaN entropy opens an alert"
    return {"run_id": run_id, "alert_id": ack["alerts"][0]["id"]}


def requests(svc: Service, ids: dict[str, Any]) -> dict[tuple[str, str], Callable[[], Any]]:
    """(method, OpenAPI path) -> a function giving (path, body) of a valid request."""
    run = f"{API}/runs/{ids['run_id']}"

    def new_token_path() -> tuple[str, None]:
        return f"{API}/tokens/{svc.issue('read')[0]}", None

    def new_run(project: str = "auth") -> str:
        run_id = new_run_id("doomed")
        admin = {"Authorization": f"Bearer {svc.tokens['admin']}"}
        created = httpx.post(
            f"{svc.url}{API}/runs", json={"id": run_id, "project": project}, headers=admin
        )
        assert created.status_code == 201
        return run_id

    def new_command_path() -> tuple[str, dict[str, bool]]:
        run_id = new_run()
        admin = {"Authorization": f"Bearer {svc.tokens['admin']}"}
        asked = httpx.post(f"{svc.url}{API}/runs/{run_id}/checkpoint", headers=admin)
        assert asked.status_code == 202
        return f"{API}/runs/{run_id}/commands/{asked.json()['id']}", {"delivered": True}

    def new_policy_path() -> tuple[str, None]:
        admin = {"Authorization": f"Bearer {svc.tokens['admin']}"}
        made = httpx.post(
            f"{svc.url}{API}/projects/auth/policies", json={"alert": "kl_spike"}, headers=admin
        )
        assert made.status_code == 201
        return f"{API}/projects/auth/policies/{made.json()['id']}", None

    def new_hook_path(suffix: str = "") -> str:
        with write_session(svc.app.state.session_factory) as session:
            # Nothing listens on port 9 (discard): a test of it answers delivered: false.
            hook = webhook_store.add_hook(session, WebhookCreate(url=UNREACHABLE), "auth-test")
            session.commit()
            return f"{API}/webhooks/{hook.id}{suffix}"

    def new_project_path() -> tuple[str, None]:
        project = new_run_id("project")
        new_run(project)
        return f"{API}/projects/{project}", None

    return {
        ("POST", "/api/v1/runs"): lambda: (
            f"{API}/runs",
            {"id": new_run_id("auth"), "project": "auth"},
        ),
        ("GET", "/api/v1/runs"): lambda: (f"{API}/runs", None),
        ("GET", "/api/v1/runs/{run_id}"): lambda: (run, None),
        ("GET", "/api/v1/runs/{run_id}/markers"): lambda: (f"{run}/markers", None),
        ("GET", "/api/v1/run-fields"): lambda: (f"{API}/run-fields", None),
        ("GET", "/api/v1/projects"): lambda: (f"{API}/projects", None),
        ("GET", "/api/v1/token-access"): lambda: (f"{API}/token-access", None),
        ("GET", "/api/v1/groups"): lambda: (
            f"{API}/groups?runs={ids['run_id']}&signals=entropy",
            None,
        ),
        ("DELETE", "/api/v1/runs/{run_id}"): lambda: (f"{API}/runs/{new_run()}", None),
        ("DELETE", "/api/v1/projects/{project}"): new_project_path,
        ("POST", "/api/v1/runs/{run_id}/archive"): lambda: (f"{run}/archive", None),
        ("DELETE", "/api/v1/runs/{run_id}/archive"): lambda: (f"{run}/archive", None),
        ("POST", "/api/v1/projects/{project}/archive"): lambda: (
            f"{API}/projects/auth/archive",
            None,
        ),
        ("DELETE", "/api/v1/projects/{project}/archive"): lambda: (
            f"{API}/projects/auth/archive",
            None,
        ),
        ("PATCH", "/api/v1/runs/{run_id}"): lambda: (run, {"name": "renamed"}),
        ("POST", "/api/v1/runs/{run_id}/heartbeat"): lambda: (f"{run}/heartbeat", {}),
        ("POST", "/api/v1/runs/{run_id}/detect"): lambda: (f"{run}/detect", {"apply": False}),
        ("POST", "/api/v1/runs/{run_id}/rewind"): lambda: (
            f"{run}/rewind",
            {"resume_from_step": 30},
        ),
        ("POST", "/api/v1/runs/{run_id}/batches"): lambda: (
            f"{run}/batches",
            {"batch_id": new_run_id("b"), "steps": [{"step": 40, "values": {"x": 1.0}}]},
        ),
        ("GET", "/api/v1/runs/{run_id}/keys"): lambda: (f"{run}/keys", None),
        ("GET", "/api/v1/runs/{run_id}/series"): lambda: (f"{run}/series", None),
        ("GET", "/api/v1/series"): lambda: (
            f"{API}/series?runs={ids['run_id']}&signals=entropy",
            None,
        ),
        ("GET", "/api/v1/runs/{run_id}/export"): lambda: (f"{run}/export", None),
        ("GET", "/api/v1/runs/{run_id}/alerts"): lambda: (f"{run}/alerts", None),
        ("POST", "/api/v1/runs/{run_id}/stop"): lambda: (f"{API}/runs/{new_run()}/stop", None),
        ("POST", "/api/v1/runs/{run_id}/checkpoint"): lambda: (
            f"{API}/runs/{new_run()}/checkpoint",
            {"reason": "before the lr drop"},
        ),
        ("GET", "/api/v1/runs/{run_id}/commands"): lambda: (f"{run}/commands", None),
        ("GET", "/api/v1/projects/{project}/policies"): lambda: (
            f"{API}/projects/auth/policies",
            None,
        ),
        ("POST", "/api/v1/projects/{project}/policies"): lambda: (
            f"{API}/projects/auth/policies",
            {"alert": "nonfinite", "dry_run": True},
        ),
        ("DELETE", "/api/v1/projects/{project}/policies/{policy_id}"): new_policy_path,
        ("POST", "/api/v1/projects/{project}/policy-backtest"): lambda: (
            f"{API}/projects/auth/policy-backtest",
            {"alert": "nonfinite"},
        ),
        ("PATCH", "/api/v1/runs/{run_id}/commands/{command_id}"): new_command_path,
        ("POST", "/api/v1/runs/{run_id}/samples"): lambda: (
            f"{run}/samples",
            {"batch_id": new_run_id("s"), "samples": [{"step": 3, "index": 0, "reward": 1.0}]},
        ),
        ("GET", "/api/v1/runs/{run_id}/samples"): lambda: (f"{run}/samples", None),
        ("GET", "/api/v1/runs/{run_id}/sample-steps"): lambda: (f"{run}/sample-steps", None),
        ("GET", "/api/v1/alerts/{alert_id}/samples"): lambda: (
            f"{API}/alerts/{ids['alert_id']}/samples",
            None,
        ),
        ("GET", "/api/v1/alerts"): lambda: (f"{API}/alerts", None),
        ("GET", "/api/v1/alerts/{alert_id}"): lambda: (f"{API}/alerts/{ids['alert_id']}", None),
        ("PATCH", "/api/v1/alerts/{alert_id}"): lambda: (
            f"{API}/alerts/{ids['alert_id']}",
            {"acknowledged": True},
        ),
        ("POST", "/api/v1/tokens"): lambda: (f"{API}/tokens", {"name": "t", "scope": "read"}),
        ("GET", "/api/v1/tokens"): lambda: (f"{API}/tokens", None),
        ("DELETE", "/api/v1/tokens/{token_id}"): new_token_path,
        ("POST", "/api/v1/webhooks"): lambda: (f"{API}/webhooks", {"url": UNREACHABLE}),
        ("GET", "/api/v1/webhooks"): lambda: (f"{API}/webhooks", None),
        ("GET", "/api/v1/webhooks/{hook_id}"): lambda: (new_hook_path(), None),
        ("PATCH", "/api/v1/webhooks/{hook_id}"): lambda: (new_hook_path(), {"enabled": False}),
        ("DELETE", "/api/v1/webhooks/{hook_id}"): lambda: (new_hook_path(), None),
        ("POST", "/api/v1/webhooks/{hook_id}/test"): lambda: (new_hook_path("/test"), None),
        ("GET", "/api/v1/health"): lambda: (f"{API}/health", None),
        ("GET", "/metrics"): lambda: ("/metrics", None),
    }


def test_auth_every_endpoint_refuses_wrong_tokens_and_answers_its_scope(service: Service) -> None:
    table = requests(service, fixtures(service))
    document = httpx.get(service.url + "/openapi.json").json()["paths"]
    operations = {(m.upper(), p) for p, ops in document.items() for m in ops}
    assert operations == set(table), "every endpoint needs a valid request in this table"
    routes = access_table("/api")
    for (method, template), make in sorted(table.items()):
        scope = routes[(method, template)]
        if scope == "public":
            assert call(service, method, *make(), token=None) == 200, template
            continue
        for wrong in (None, "rlg_00000000_" + "x" * 43, "not-a-token", service.revoked):
            assert call(service, method, *make(), token=wrong) == 401, (template, wrong)
        if scope in LOWER:
            assert call(service, method, *make(), token=service.tokens[LOWER[scope]]) == 403
        status = call(service, method, *make(), token=service.tokens[scope])
        assert 200 <= status < 300, (method, template, scope, status)


LISTS = {("GET", "/api/v1/runs"), ("GET", "/api/v1/alerts")}
LISTS |= {("GET", "/api/v1/projects"), ("GET", "/api/v1/run-fields")}
LISTS |= {("GET", "/api/v1/token-access")}  # its own token's, whatever its project
SERVICE_WIDE = {("POST", "/api/v1/tokens"), ("GET", "/api/v1/tokens"), ("GET", "/metrics")}
SERVICE_WIDE |= {("DELETE", "/api/v1/tokens/{token_id}")}
SERVICE_WIDE |= {(m, "/api/v1/webhooks") for m in ("GET", "POST")}
SERVICE_WIDE |= {(m, "/api/v1/webhooks/{hook_id}") for m in ("GET", "PATCH", "DELETE")}
SERVICE_WIDE |= {("POST", "/api/v1/webhooks/{hook_id}/test")}


def test_auth_project_tokens_reach_only_their_project(service: Service) -> None:
    """An admin token of another project is refused everywhere but the lists, which it sees
    empty; one of the run's own project answers 2xx except on the service-wide routes."""
    ids = fixtures(service)
    table = requests(service, ids)
    routes = access_table("/api")
    own, other = service.issue("admin", "auth")[1], service.issue("admin", "elsewhere")[1]
    for (method, template), make in sorted(table.items()):
        if routes[(method, template)] == "public":
            continue
        status = call(service, method, *make(), token=other)
        assert status == (200 if (method, template) in LISTS else 403), (template, status)
        status = call(service, method, *make(), token=own)
        foreign = template == "/api/v1/projects/{project}"  # makes a project of its own
        if (method, template) in SERVICE_WIDE or foreign:
            assert status == 403, (template, status)
        else:
            assert 200 <= status < 300, (method, template, status)
    projects = httpx.get(
        f"{service.url}{API}/projects", headers={"Authorization": f"Bearer {other}"}
    )
    assert projects.json()["count"] == 0  # its own project holds no runs
    for path in ("/runs", "/alerts"):
        seen = httpx.get(f"{service.url}{API}{path}", headers={"Authorization": f"Bearer {other}"})
        assert seen.json()["count"] == 0, path
        asked = httpx.get(
            f"{service.url}{API}{path}",
            params={"project": "auth"},
            headers={"Authorization": f"Bearer {other}"},
        )
        assert asked.status_code == 403 and "limited to project 'elsewhere'" in asked.text
    created = call(service, "POST", f"{API}/runs", {"id": "x-1", "project": "auth"}, token=other)
    assert created == 403


def test_auth_reads_of_several_runs_are_refused_when_one_is_of_another_project(
    service: Service,
) -> None:
    """A token limited to a project reads its runs together, and none when any asked-for run
    is another project's (403, as that run's own reads would be)."""
    ids = fixtures(service)
    own, other = service.issue("read", "auth")[1], service.issue("read", "elsewhere")[1]
    admin = {"Authorization": f"Bearer {service.tokens['admin']}"}
    stranger = new_run_id("stranger")
    made = httpx.post(
        f"{service.url}{API}/runs", json={"id": stranger, "project": "elsewhere"}, headers=admin
    )
    assert made.status_code == 201
    for path in ("/series?signals=entropy&runs=", "/groups?signals=entropy&runs="):
        both = f"{API}{path}{ids['run_id']},{stranger}"
        assert call(service, "GET", both, token=own) == 403, path
        assert call(service, "GET", both, token=other) == 403, path
        assert call(service, "GET", f"{API}{path}{ids['run_id']}", token=own) == 200, path
        assert call(service, "GET", f"{API}{path}{stranger}", token=other) == 200, path
        assert call(service, "GET", both, token=service.tokens["read"]) == 200, path


def test_auth_alert_ids_past_the_largest_integer_are_refused_with_422(service: Service) -> None:
    """An alert id no database can hold is a 422 naming the parameter, also for a token limited
    to a project (whose check looks the alert up first): it was a 500 (OverflowError)."""
    own = service.issue("admin", "auth")[1]
    for alert_id in (2**63, 10**40):
        for token in (service.tokens["admin"], own):
            for method, path, body in (
                ("PATCH", f"{API}/alerts/{alert_id}", {"acknowledged": True}),
                ("GET", f"{API}/alerts/{alert_id}/samples", None),
            ):
                headers = {"Authorization": f"Bearer {token}"}
                answer = httpx.request(method, service.url + path, json=body, headers=headers)
                assert answer.status_code == 422, (path, answer.text)
                assert answer.json()["detail"][0]["loc"] == ["path", "alert_id"]
    assert call(service, "GET", f"{API}/alerts/{2**63 - 1}/samples", token=own) == 404


def test_auth_hook_streams_with_a_write_token(service: Service, tmp_path: Any) -> None:
    run_id = new_run_id("hook")
    run = rlguard.init(
        project="auth",
        run_id=run_id,
        url=service.url,
        token=service.tokens["write"],
        spool_dir=str(tmp_path / "spool"),
    )
    for step in range(30):
        run.log({"loss": step * 0.5}, step=step)
    status = run.finish(timeout_s=30)
    assert (status.sent, status.spooled, status.dead_lettered) == (30, 0, 0)
    with httpx.Client(headers={"Authorization": f"Bearer {service.tokens['read']}"}) as http:
        answer = http.get(f"{service.url}{API}/runs/{run_id}/keys").json()
    assert answer["data"][0]["count"] == 30
    assert call(service, "GET", f"{API}/runs/{run_id}", token=None) == 401


def test_auth_hook_with_a_read_token_is_told_to_get_a_write_token(
    service: Service, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="rlguard")
    run = rlguard.init(
        project="auth",
        url=service.url,
        token=service.tokens["read"],
        spool_dir=str(tmp_path / "spool"),
        gpu=False,
        quiet=True,
    )
    run.log({"loss": 0.5}, step=0)
    said = wait_for(
        lambda: [r.getMessage() for r in caplog.records if "token" in r.getMessage()],
        30,
        "the hook's warning about its token",
    )
    status = run.finish(timeout_s=0)
    assert status.spool_points == 1 and "HTTP 403" in (status.last_error or "")
    assert len(said) == 1 and "unreachable" not in said[0]
    assert said[0].startswith("rlguard: this run's token cannot write to project 'auth' (")
    assert "`rlguard token create --name trainer --scope write`" in said[0]


def test_auth_revoked_token_is_refused_at_once_by_its_process(service: Service) -> None:
    token_id, token = service.issue("read")
    assert call(service, "GET", f"{API}/runs", token=token) == 200  # now cached
    admin = service.tokens["admin"]
    assert call(service, "DELETE", f"{API}/tokens/{token_id}", token=admin) == 200
    assert call(service, "GET", f"{API}/runs", token=token) == 401
    listed = httpx.get(
        f"{service.url}{API}/tokens", headers={"Authorization": f"Bearer {admin}"}
    ).json()
    assert token not in str(listed) and listed["count"] == 5


def test_auth_token_id_past_what_the_database_stores_is_422(service: Service) -> None:
    """The deep fuzz found 2^63 answered 500 (an integer SQLite cannot bind)."""
    admin = service.tokens["admin"]
    for token_id in (2**63, 0):
        assert call(service, "DELETE", f"{API}/tokens/{token_id}", token=admin) == 422
    assert call(service, "DELETE", f"{API}/tokens/{2**63 - 1}", token=admin) == 404


def test_auth_tokens_are_stored_salted_and_hashed(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        from rlguard_backend.core import migrate

        migrate.upgrade(engine)
        with write_session(make_session_factory(engine)) as session:
            row, token = auth.issue(session, "x", auth.Scope.write, "proj")
            session.commit()
            assert token.split("_")[2] not in (row.token_hash, row.salt)
            identity = auth.check(session, token)
            assert identity == auth.Identity(row.id, "x", auth.Scope.write, "proj")
            assert auth.check(session, token[:-1] + ("A" if token[-1] != "A" else "B")) is None
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("host", "mode", "expected"),
    [
        ("127.0.0.1", "auto", "off"),
        ("::1", "auto", "off"),
        ("localhost", "auto", "off"),
        ("127.0.0.1", "on", "on"),
        ("0.0.0.0", "auto", "on"),
        ("10.1.2.3", "on", "on"),
        ("0.0.0.0", "off", SystemExit),
    ],
)
def test_auth_settings_for_host(host: str, mode: str, expected: Any) -> None:
    settings = Settings(auth=mode)
    if expected is SystemExit:
        with pytest.raises(SystemExit, match="refusing to serve"):
            settings_for_host(settings, host)
    else:
        assert settings_for_host(settings, host).auth == expected


def test_auth_on_with_an_empty_token_store_refuses_to_start(tmp_path: Any) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rlguard", "server", "--port", "0"],
        env=child_env(
            RLGUARD_AUTH="on", RLGUARD_DATABASE_URL=f"sqlite:///{tmp_path / 'rlguard.db'}"
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "rlguard token create --name admin --scope admin" in result.stderr


def test_auth_project_token_reads_a_run_by_name_within_its_project(service: Service) -> None:
    """Two projects each hold a run of one name: a token limited to a project reads its own,
    an unlimited one is told the name is ambiguous."""
    name = new_run_id("shared-name")
    admin = {"Authorization": f"Bearer {service.tokens['admin']}"}
    ids = {}
    for project in ("auth", "elsewhere"):
        ids[project] = new_run_id(project)
        body = {"id": ids[project], "project": project, "name": name}
        assert httpx.post(f"{service.url}{API}/runs", json=body, headers=admin).status_code == 201
    for project in ("auth", "elsewhere"):
        token = service.issue("read", project)[1]
        answer = httpx.get(
            f"{service.url}{API}/runs/{name}/keys", headers={"Authorization": f"Bearer {token}"}
        )
        assert answer.status_code == 200, answer.text
        read = httpx.get(
            f"{service.url}{API}/runs/{name}", headers={"Authorization": f"Bearer {token}"}
        )
        assert read.json()["id"] == ids[project]
    ambiguous = httpx.get(f"{service.url}{API}/runs/{name}", headers=admin)
    assert ambiguous.status_code == 409
    assert ids["auth"] in ambiguous.json()["detail"] and ids["elsewhere"] in ambiguous.text


def test_auth_token_access_says_the_scope_and_project_of_the_token(service: Service) -> None:
    _, limited = service.issue("write", "auth")
    for token, expected in (
        (service.tokens["read"], {"name": "test-read", "scope": "read", "project": None}),
        (limited, {"name": "test-write", "scope": "write", "project": "auth"}),
    ):
        answer = httpx.get(
            f"{service.url}{API}/token-access", headers={"Authorization": f"Bearer {token}"}
        )
        assert answer.json() == expected
