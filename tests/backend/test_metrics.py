"""GET /metrics parses with Prometheus' own text parser and counts what ingest did."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import RunningServer, new_run_id


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    answer = httpx.get(f"{url}/metrics", timeout=30)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def test_metrics_count_batches_points_alerts_and_outbox(db_server: RunningServer) -> None:
    run_id = new_run_id("metrics")
    with httpx.Client(base_url=db_server.url + "/api/v1", timeout=30) as http:
        assert http.post("/runs", json={"id": run_id, "project": "m"}).status_code == 201
        steps = [{"step": s, "values": {"actor/entropy": "NaN", "x": 1.0}} for s in range(25)]
        batch = {"batch_id": "one", "steps": steps}
        assert http.post(f"/runs/{run_id}/batches", json=batch).json()["duplicate"] is False
        assert http.post(f"/runs/{run_id}/batches", json=batch).json()["duplicate"] is True
        open_alerts = http.get("/alerts", params={"status": "open", "limit": 1000}).json()["data"]
    figures = scrape(db_server.url)
    assert figures[("rlguard_points_stored_total", ())] == 50
    assert figures[("rlguard_ingest_batches_total", (("outcome", "stored"),))] == 1
    assert figures[("rlguard_ingest_batches_total", (("outcome", "duplicate"),))] == 1
    assert figures[("rlguard_batch_seconds_count", ())] == 2
    assert figures[("rlguard_detector_seconds_count", ())] == 1
    assert figures[("rlguard_writes_refused_total", ())] == 0
    assert figures[("rlguard_bodies_refused_total", ())] == 0
    assert figures[("rlguard_body_bytes_in_flight", ())] == 0  # the bodies above were released
    for severity in ("info", "warn", "critical"):
        expected = sum(1 for a in open_alerts if a["severity"] == severity)
        assert figures[("rlguard_open_alerts", (("severity", severity),))] == expected
    assert sum(figures[("rlguard_open_alerts", (("severity", s),))] for s in ("warn", "critical"))
    assert figures[("rlguard_webhook_outbox", ())] == 0
