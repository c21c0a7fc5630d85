"""Request ids and JSON logs from a real `rlguard server` process."""

from __future__ import annotations

import json
import queue
from pathlib import Path

import httpx

from tests.hook.hookutil import ServiceProcess, wait_for


def test_request_ids_are_echoed_and_logged_as_json(tmp_path: Path) -> None:
    env = {"RLGUARD_LOG_FORMAT": "json", "RLGUARD_ACCESS_LOG": "true"}
    service = ServiceProcess(tmp_path / "rlguard.db", env=env).start()
    try:
        mine = httpx.get(
            f"{service.url}/api/v1/runs/ghost", headers={"X-Request-ID": "trainer-7.step-12"}
        )
        assert (mine.status_code, mine.headers["x-request-id"]) == (404, "trainer-7.step-12")
        made = httpx.get(f"{service.url}/api/v1/health", headers={"X-Request-ID": "bad id!"})
        assert len(made.headers["x-request-id"]) == 32 and made.headers["x-request-id"].isalnum()
        records: list[dict] = []

        def logged_both() -> bool:
            while True:
                try:
                    line = service.lines.get_nowait()
                except queue.Empty:
                    break
                if line.startswith("{"):
                    records.append(json.loads(line))
            ids = {r.get("request_id") for r in records if r["logger"] == "rlguard_backend.access"}
            return {"trainer-7.step-12", made.headers["x-request-id"]} <= ids

        wait_for(logged_both, 30, "two access records")
        access = next(r for r in records if r.get("request_id") == "trainer-7.step-12")
        assert (access["method"], access["path"], access["status"]) == (
            "GET",
            "/api/v1/runs/ghost",
            404,
        )
        assert access["duration_ms"] >= 0 and access["level"] == "info"
    finally:
        service.stop()
