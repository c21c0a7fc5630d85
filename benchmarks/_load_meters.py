"""What the load benchmark measures while a level runs: the service's CPU and peak RSS, the
trainers' and the machine's CPU (``ProcessMeter``), and read latency under load (``Reader``)."""

from __future__ import annotations

import collections
import os
import resource
import threading
import time
from pathlib import Path

import httpx

READ_INTERVAL_S = 0.25
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


class ProcessMeter:
    """CPU seconds and peak RSS of the service's processes, read from /proc while a level runs."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.peak_rss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def cpu_s(self) -> float:
        total = 0
        for pid in self.pids:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        return total / CLOCK_TICKS

    def rss(self) -> int:
        pages = sum(int(Path(f"/proc/{p}/statm").read_text().split()[1]) for p in self.pids)
        return pages * PAGE_BYTES

    def __enter__(self) -> ProcessMeter:
        self.peak_rss, self._cpu0, self._t0 = self.rss(), self.cpu_s(), time.monotonic()
        self._children0, self._machine0 = _children_cpu_s(), _machine_busy()
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        wall = time.monotonic() - self._t0
        self.cpu_percent = 100 * (self.cpu_s() - self._cpu0) / wall
        self.trainers_cpu_percent = 100 * (_children_cpu_s() - self._children0) / wall
        busy, total = (b - a for a, b in zip(self._machine0, _machine_busy(), strict=True))
        self.machine_cpu_percent = 100 * busy / max(total, 1)
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            self.peak_rss = max(self.peak_rss, self.rss())


def _children_cpu_s() -> float:
    """CPU of the trainer processes this benchmark has waited for (the service is not one)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _machine_busy() -> tuple[int, int]:
    """(busy, total) clock ticks of all cores since boot, from /proc/stat."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]
    return sum(ticks) - idle, sum(ticks)


class Reader:
    """Reads one run's series and the health endpoint every READ_INTERVAL_S, timing each."""

    def __init__(self, url: str, run_id: str) -> None:
        self.url, self.run_id = url, run_id
        self.samples: list[float] = []
        self.failures = 0
        self.failure_kinds: collections.Counter[str] = collections.Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def read_once(self, http: httpx.Client) -> None:
        for path in (f"/runs/{self.run_id}/series?keys=load/metric_000&max_points=500", "/health"):
            started = time.perf_counter()
            try:
                answer = http.get(f"{self.url}/api/v1{path}")
            except httpx.HTTPError as exc:
                self.failures += 1
                self.failure_kinds[type(exc).__name__] += 1
                continue
            if answer.status_code in (200, 404):  # 404: the run is not created yet
                self.samples.append(time.perf_counter() - started)
            else:
                self.failures += 1
                self.failure_kinds[str(answer.status_code)] += 1

    def __enter__(self) -> Reader:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        with httpx.Client(timeout=30) as http:
            while not self._stop.wait(READ_INTERVAL_S):
                self.read_once(http)
