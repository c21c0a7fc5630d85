"""The spool: durable batch files, oldest first, bounded by a budget, dead letters."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path

from rlguard._spool import Spool, spooled_run_ids


def test_spool_put_then_pending_oldest_first(tmp_path: Path) -> None:
    spool = Spool(tmp_path, "run-1", budget_bytes=10_000)
    for i in range(5):
        assert spool.put(f"b{i}", points=i, body=f"body{i}".encode()) is not None
    pending = spool.pending()
    assert [b.batch_id for b in pending] == ["b0", "b1", "b2", "b3", "b4"]
    assert [b.points for b in pending] == [0, 1, 2, 3, 4]
    assert spool.read(pending[2]) == b"body2"
    assert not list(spool.dir.glob(".*.tmp"))


def test_spool_put_refuses_beyond_budget(tmp_path: Path) -> None:
    spool = Spool(tmp_path, "run-1", budget_bytes=250)
    stored = [spool.put(f"b{i}", 1, b"x" * 100) for i in range(3)]
    assert [s is not None for s in stored] == [True, True, False]
    spool.remove(spool.pending()[0], 100)
    assert spool.put("b3", 1, b"x" * 100) is not None


def test_spool_budget_counts_files_left_by_an_earlier_process(tmp_path: Path) -> None:
    Spool(tmp_path, "run-1", budget_bytes=250).put("old", 1, b"x" * 200)
    later = Spool(tmp_path, "run-1", budget_bytes=250)
    assert later.size_bytes() == 200
    assert later.put("new", 1, b"x" * 100) is None


def test_spool_read_after_removal_by_another_process_is_none(tmp_path: Path) -> None:
    spool = Spool(tmp_path, "run-1", budget_bytes=1000)
    spool.put("b", 1, b"x")
    batch = spool.pending()[0]
    batch.path.unlink()
    assert spool.read(batch) is None
    spool.remove(batch, 1)


def test_spool_dead_letter_keeps_the_body(tmp_path: Path) -> None:
    spool = Spool(tmp_path, "run-1", budget_bytes=1000)
    body = gzip.compress(b'{"batch_id": "b"}')
    path = spool.dead_letter(body, "HTTP 422")
    record = json.loads(path.read_text().splitlines()[0])
    assert record["reason"] == "HTTP 422"
    assert base64.b64decode(record["body_gzip_b64"]) == body


def test_spooled_run_ids_lists_runs_with_work(tmp_path: Path) -> None:
    Spool(tmp_path, "with-batch", 1000).put("b", 1, b"x")
    Spool(tmp_path, "with-final", 1000).write_json("final.json", {"status": "finished"})
    Spool(tmp_path, "empty", 1000).write_json("run.json", {"id": "empty"})
    assert spooled_run_ids(tmp_path) == ["with-batch", "with-final"]
