"""The MCP server over both transports (the mcp package's own client; stdio against a real
``rlguard mcp`` subprocess, streamable HTTP against the real service's ``/mcp``), with the
tokens' scopes and projects enforced as for REST."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from mcp import ClientSession

from rlguard.protocol import run_page_url
from rlguard_backend.core.app import create_app
from rlguard_backend.core.config import Settings
from rlguard_backend.core.serve import ServerThread
from rlguard_compose.serve import combined_app
from tests.backend.mcp_clients import TOOLS, call, run_with
from tests.backend.test_auth import Service, serve_with_tokens
from tests.conftest import RunningServer, new_run_id

API = "/api/v1"
TRANSPORTS = ["http", "stdio"]
STEPS = 30


@pytest.fixture
def service(sqlite_url: str) -> Iterator[Service]:
    """The service with auth on and a token of each scope (as in test_auth)."""
    yield from serve_with_tokens(sqlite_url)


def make_run(
    url: str,
    token: str | None,
    project: str,
    config: dict[str, Any],
    nan: bool,
    tags: tuple[str, ...] = (),
) -> str:
    """A run of STEPS steps with samples; ``nan``: its entropy turns NaN at step 20 (an alert)."""
    run_id = new_run_id("mcp")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx.Client(base_url=url + API, headers=headers, timeout=30)
    run = {"id": run_id, "project": project, "config": config, "tags": list(tags)}
    made = http.post("/runs", json=run)
    assert made.status_code == 201, made.text
    steps = [
        {
            "step": s,
            "values": {
                "actor/entropy": "NaN" if nan and s >= 20 else 1.0 - 0.01 * s,
                "actor/pg_clipfrac": 0.5 if nan and s >= 20 else 0.01,
                "critic/score/mean": 0.02 * s,
            },
        }
        for s in range(1, STEPS + 1)
    ]
    ack = http.post(f"/runs/{run_id}/batches", json={"batch_id": "b", "steps": steps})
    assert ack.status_code == 200, ack.text
    samples = [
        {"step": s, "index": i, "reward": float(i), "prompt": f"{s}+{i}=", "response": "x" * 900}
        for s in (10, 25)
        for i in range(4)
    ]
    sent = http.post(f"/runs/{run_id}/samples", json={"batch_id": "s", "samples": samples})
    assert sent.status_code == 200, sent.text
    return run_id


def first_alert(url: str, token: str | None, run_id: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    alerts = httpx.get(f"{url}{API}/runs/{run_id}/alerts", headers=headers).json()["data"]
    return min(alerts, key=lambda a: a["first_step"])


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_mcp_read_token_reads_and_is_refused_the_commands(service: Service, transport: str) -> None:
    admin = service.tokens["admin"]
    sick = make_run(service.url, admin, "mcp", {"lr": 0.1, "seed": 1}, nan=True)
    alert = first_alert(service.url, admin, sick)

    async def scenario(session: ClientSession) -> None:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == TOOLS
        for name in ("stop_run", "checkpoint_run"):
            hints = tools[name].annotations
            assert hints is not None and hints.destructive_hint and not hints.read_only_hint
        assert all(
            tools[name].annotations.read_only_hint
            for name in TOOLS - {"stop_run", "checkpoint_run"}
        )  # type: ignore[union-attr]
        runs = (await call(session, "list_runs", project="mcp", health="critical")).data
        assert [r["id"] for r in runs["runs"]] == [sick] and runs["runs"][0]["open_alerts"] >= 1
        health = (await call(session, "run_health", run_id=sick)).data
        assert (health["status"], health["last_step"], health["health"]) == (
            "running",
            STEPS,
            "critical",
        )
        opened = {a["id"]: a for a in health["open_alerts"]}
        assert opened[alert["id"]]["evidence"] and opened[alert["id"]]["advice"]
        # links: over stdio to --url (where `rlguard up` serves the dashboard); the mounted
        # server of a service without RLGUARD_PUBLIC_URL has no address to link to
        shown = opened[alert["id"]]
        if transport == "stdio":
            assert runs["runs"][0]["url"] == health["url"] == run_page_url(service.url, sick)
            assert shown["url"] == run_page_url(
                service.url, sick, shown["first_step"], shown["last_step"]
            )
        else:
            assert runs["runs"][0]["url"] is health["url"] is shown["url"] is None
        clipfrac = health["signals"]["clipfrac"]
        assert (clipfrac["last"], clipfrac["warn"], clipfrac["critical"]) == (0.5, 0.05, 0.2)
        assert clipfrac["level"] == "critical"
        refused = await call(session, "stop_run", run_id=sick, reason="collapsed")
        assert refused.is_error and "403" in refused.text and "scope read" in refused.text
        assert "rlguard token create --scope write" in refused.text

    run_with(transport, service.url, service.tokens["read"], scenario)
    commands = httpx.get(
        f"{service.url}{API}/runs/{sick}/commands",
        headers={"Authorization": f"Bearer {admin}"},
    ).json()
    assert commands["count"] == 0  # the refused stop queued nothing


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_mcp_write_token_stops_and_checkpoints_a_run(service: Service, transport: str) -> None:
    admin = service.tokens["admin"]
    run_id = make_run(service.url, admin, "mcp", {"lr": 0.1}, nan=False)

    async def scenario(session: ClientSession) -> None:
        saved = (await call(session, "checkpoint_run", run_id=run_id, reason="before lr drop")).data
        assert (saved["command"]["kind"], saved["command"]["state"]) == ("checkpoint", "pending")
        stopped = (await call(session, "stop_run", run_id=run_id, reason="entropy collapsed")).data
        assert stopped["command"]["reason"] == "entropy collapsed"
        again = await call(session, "stop_run", run_id=run_id)
        assert again.is_error and "409" in again.text

    run_with(transport, service.url, service.tokens["write"], scenario)
    commands = httpx.get(
        f"{service.url}{API}/runs/{run_id}/commands",
        headers={"Authorization": f"Bearer {admin}"},
    ).json()
    assert sorted(c["kind"] for c in commands["data"]) == ["checkpoint", "stop"]
    assert {c["requested_by"] for c in commands["data"]} == {"test-write"}  # the token's name


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_mcp_project_token_reaches_only_its_project(service: Service, transport: str) -> None:
    admin = service.tokens["admin"]
    theirs = make_run(service.url, admin, "elsewhere", {}, nan=False)
    mine = make_run(service.url, admin, "mine", {}, nan=False)
    token = service.issue("read", "mine")[1]

    async def scenario(session: ClientSession) -> None:
        runs = (await call(session, "list_runs")).data
        assert [r["id"] for r in runs["runs"]] == [mine]
        refused = await call(session, "run_health", run_id=theirs)
        assert (
            refused.is_error
            and "403" in refused.text
            and "limited to project 'mine'" in refused.text
        )

    run_with(transport, service.url, token, scenario)


def test_mcp_http_door_refuses_a_missing_or_unknown_token(service: Service) -> None:
    hello = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    for headers in ({}, {"Authorization": "Bearer rlg_00000000_" + "x" * 43}):
        answer = httpx.post(f"{service.url}/mcp", json=hello, headers=headers)
        assert answer.status_code == 401, answer.text
        assert "token" in answer.json()["detail"]


def test_mcp_stdio_with_a_revoked_token_gets_the_rest_401(service: Service) -> None:
    async def scenario(session: ClientSession) -> None:
        refused = await call(session, "list_runs")
        assert refused.is_error and "401" in refused.text and "RLGUARD_TOKEN" in refused.text

    run_with("stdio", service.url, service.revoked, scenario)


def test_mcp_tools_answer_series_samples_incident_and_comparisons(
    db_server: RunningServer,
) -> None:
    """Auth off (loopback), both databases: every read tool over HTTP, on a sick run and two
    seed siblings."""
    config, tag = {"lr": 0.1, "actor": {"clip": 0.2}}, new_run_id("tag")
    sick = make_run(db_server.url, None, "cmp", {**config, "seed": 0}, nan=True, tags=(tag,))
    siblings = [
        make_run(db_server.url, None, "cmp", {**config, "seed": s}, nan=False, tags=(tag,))
        for s in (1, 2)
    ]
    slower = {"lr": 0.001, "actor": {"clip": 0.2}}
    other = make_run(db_server.url, None, "cmp", slower, nan=False, tags=(tag,))
    alert = first_alert(db_server.url, None, sick)

    async def scenario(session: ClientSession) -> None:
        series = (await call(session, "get_series", run_id=sick, keys=["entropy", "nope"])).data
        assert series["series"]["entropy"]["steps"][:3] == [1, 2, 3]
        assert series["series"]["entropy"]["values"][:2] == [0.99, 0.98] and series["missing"] == [
            "nope"
        ]
        wide = (
            await call(session, "get_series", run_id=sick, keys=["clipfrac"], max_points=8)
        ).data
        assert (
            wide["series"]["clipfrac"]["points"] == STEPS
            and max(wide["series"]["clipfrac"]["max"]) == 0.5
        )
        around = (await call(session, "get_samples", run_id=sick, step=24, window=1)).data
        assert around["count"] == 4 and [s["reward"] for s in around["samples"]] == [0, 1, 2, 3]
        assert (
            around["samples"][0]["response"].endswith("…")
            and len(around["samples"][0]["response"]) == 301
        )
        found = (await call(session, "incident", alert_id=alert["id"])).data
        assert (found["onset_step"], found["steps_since_onset"]) == (
            alert["first_step"],
            STEPS - alert["first_step"],
        )
        assert found["samples"]["before"]["step"] == 10 and found["samples"]["after"]["step"] == 25
        assert found["moved_with_it"][0]["signal"] == "clipfrac"
        assert found["healthiest_sibling"]["config_differences"]["seed"][0] == 0
        band = (await call(session, "compare_runs", run_id=sick, signals=["clipfrac"], bins=5)).data
        assert sorted(band["seed_group"]) == sorted(siblings)
        assert band["signals"]["clipfrac"]["steps_outside_band"]  # 0.5 from step 20, the band 0.01
        pair = (
            await call(
                session, "compare_runs", run_id=sick, baseline_run_id=other, signals=["clipfrac"]
            )
        ).data
        assert pair["signals"]["clipfrac"]["widest_gap"]["run"] == pytest.approx(0.5)
        asked = await call(session, "get_samples", step=3)
        assert asked.is_error and "run_id" in asked.text
        tagged = (await call(session, "list_runs", tag=tag)).data
        assert sorted(r["id"] for r in tagged["runs"]) == sorted([sick, *siblings, other])
        fast = (await call(session, "list_runs", tag=tag, config={"lr": 0.1})).data
        assert sorted(r["id"] for r in fast["runs"]) == sorted([sick, *siblings])
        finished = httpx.patch(f"{db_server.url}{API}/runs/{other}", json={"status": "finished"})
        assert finished.status_code == 200
        done = (await call(session, "list_runs", tag=tag, status="finished")).data
        assert [r["id"] for r in done["runs"]] == [other]
        untagged = (await call(session, "list_runs", tag=new_run_id("none"))).data
        assert untagged["runs"] == []

    run_with("http", db_server.url, None, scenario)


def test_mcp_is_served_by_rlguard_up_beside_the_dashboard(sqlite_url: str) -> None:
    app = combined_app(Settings(database_url=sqlite_url), "http://127.0.0.1")
    with ServerThread(app) as thread:
        run_id = make_run(thread.url, None, "up", {}, nan=False)

        async def scenario(session: ClientSession) -> None:
            runs = (await call(session, "list_runs", project="up")).data
            assert [r["id"] for r in runs["runs"]] == [run_id]
            # no RLGUARD_PUBLIC_URL: the run pages are those of the dashboard beside /mcp
            assert runs["runs"][0]["url"] == f"http://127.0.0.1/runs/{run_id}"

        run_with("http", thread.url, None, scenario)
    app.state.engine.dispose()


def test_mcp_answers_link_to_the_run_page_at_the_public_url(sqlite_url: str) -> None:
    """Every answer about a run links to its page at RLGUARD_PUBLIC_URL, zoomed on the steps
    the answer is about."""
    public = "https://rl.example.com"
    app = create_app(Settings(database_url=sqlite_url, public_url=public))
    with ServerThread(app) as thread:
        sick = make_run(thread.url, None, "links", {}, nan=True)
        alert = first_alert(thread.url, None, sick)
        first, last = alert["first_step"], alert["last_step"]

        async def scenario(session: ClientSession) -> None:
            found = (await call(session, "incident", alert_id=alert["id"])).data
            assert found["alert"]["url"] == run_page_url(public, sick, first, last)
            assert found["alert"]["url"].startswith(f"{public}/runs/{sick}?from=")
            series = await call(session, "get_series", run_id=sick, keys=["entropy"], from_step=5)
            assert series.data["url"] == run_page_url(public, sick, 5)
            samples = (await call(session, "get_samples", alert_id=alert["id"], window=30)).data
            steps = [s["step"] for s in samples["samples"]]
            assert samples["url"] == run_page_url(public, sick, min(steps), max(steps))
            asked = (await call(session, "checkpoint_run", run_id=sick)).data
            assert asked["url"] == f"{public}/runs/{sick}"

        run_with("http", thread.url, None, scenario)
    app.state.engine.dispose()


def mcp_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlguard", "mcp", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "ftp://host", "http://"])
def test_mcp_command_refuses_a_url_it_cannot_use(url: str) -> None:
    done = mcp_command("--url", url)
    assert done.returncode == 1 and f"--url {url!r} must look like http://" in done.stderr
    bad_link = mcp_command("--public-url", url)
    assert bad_link.returncode == 1
    assert f"--public-url {url!r} must look like http://" in bad_link.stderr


WITHOUT_MCP = """
import sys
sys.modules["mcp"] = None  # as if the mcp package were not installed
import httpx
from rlguard_backend.core.app import create_app
from rlguard_backend.core.config import Settings
from rlguard_backend.core.serve import ServerThread
with ServerThread(create_app(Settings(database_url=sys.argv[1]))) as thread:
    answer = httpx.post(thread.url + "/mcp", json={})
    print(answer.status_code, answer.json()["detail"])
"""


def test_mcp_endpoint_without_the_package_names_the_extra(sqlite_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_MCP, sqlite_url], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("501 ") and "pip install 'rlguard[mcp]'" in done.stdout
