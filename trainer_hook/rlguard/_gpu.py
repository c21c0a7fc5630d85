"""The system sampler: GPU (nvidia-ml-py) and host metrics every few seconds, as ``system/...``.

Without NVML or without a GPU it says so in one info line and records host metrics only. Host
metrics come from psutil when it is installed, else from ``/proc`` (Linux), else nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("rlguard")
GIB = 1024**3


class NvmlReader:
    """Reads every visible GPU through NVML; ``open()`` returns None when there is none."""

    def __init__(self, nvml: Any, handles: list[Any]) -> None:
        self._nvml = nvml
        self._handles = handles

    @classmethod
    def open(cls) -> NvmlReader | None:
        """A reader of every visible GPU, or None without nvidia-ml-py, a driver or a GPU."""
        try:
            import pynvml  # nvidia-ml-py

            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, driver errors …
            logger.info("rlguard: no GPU metrics (%s: %s)", type(exc).__name__, exc)
            return None
        if not handles:
            logger.info("rlguard: no GPU metrics (NVML sees no GPU)")
            return None
        return cls(pynvml, handles)

    def read(self) -> dict[str, float]:
        """``system/gpu<i>/<metric>`` for each GPU, skipping what a GPU does not report."""
        values: dict[str, float] = {}
        for i, handle in enumerate(self._handles):
            for name, read in self._readers(handle).items():
                try:
                    values[f"system/gpu{i}/{name}"] = float(read())
                except self._nvml.NVMLError:  # not supported on this GPU (e.g. power on some)
                    continue
        return values

    def _readers(self, handle: Any) -> dict[str, Callable[[], float]]:
        nvml = self._nvml
        return {
            "utilization": lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu,
            "memory_used_gb": lambda: nvml.nvmlDeviceGetMemoryInfo(handle).used / GIB,
            "memory_total_gb": lambda: nvml.nvmlDeviceGetMemoryInfo(handle).total / GIB,
            "power_w": lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            "temperature_c": lambda: nvml.nvmlDeviceGetTemperature(
                handle, nvml.NVML_TEMPERATURE_GPU
            ),
            "sm_clock_mhz": lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
        }

    def close(self) -> None:
        """Shut NVML down."""
        with contextlib.suppress(self._nvml.NVMLError):
            self._nvml.nvmlShutdown()


class HostReader:
    """Host CPU and memory: psutil when available, else /proc."""

    def __init__(self) -> None:
        try:
            import psutil
        except ImportError:
            psutil = None
        self._psutil = psutil
        self._last_cpu: tuple[int, int] | None = None
        if psutil is not None:
            psutil.cpu_percent(None)  # starts the measuring interval

    def read(self) -> dict[str, float]:
        """``system/cpu_percent`` and ``system/memory_*`` from psutil, else /proc."""
        if self._psutil is not None:
            memory = self._psutil.virtual_memory()
            return {
                "system/cpu_percent": float(self._psutil.cpu_percent(None)),
                "system/memory_used_gb": (memory.total - memory.available) / GIB,
                "system/memory_total_gb": memory.total / GIB,
                "system/memory_percent": float(memory.percent),
            }
        return self._read_proc()

    def _read_proc(self) -> dict[str, float]:
        values: dict[str, float] = {}
        try:
            with open("/proc/stat") as handle:
                fields = [int(x) for x in handle.readline().split()[1:]]
            idle, total = fields[3] + fields[4], sum(fields)
            if self._last_cpu is not None and total > self._last_cpu[1]:
                busy = 1 - (idle - self._last_cpu[0]) / (total - self._last_cpu[1])
                values["system/cpu_percent"] = 100.0 * busy
            self._last_cpu = (idle, total)
            with open("/proc/meminfo") as handle:
                info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in handle}
            used = info["MemTotal"] - info["MemAvailable"]
            values["system/memory_used_gb"] = used / GIB
            values["system/memory_total_gb"] = info["MemTotal"] / GIB
            values["system/memory_percent"] = 100.0 * used / info["MemTotal"]
        except (OSError, KeyError, ValueError, IndexError):
            return values
        return values


class SystemSampler:
    """A daemon thread calling ``sink(values)`` every ``interval_s`` with system metrics."""

    def __init__(self, sink: Callable[[dict[str, float]], None], interval_s: float) -> None:
        self._sink = sink
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rlguard-system", daemon=True)

    def start(self) -> None:
        """Start sampling on a daemon thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling (bounded wait; safe from the sampler's own thread)."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5.0)

    def _loop(self) -> None:
        gpus = NvmlReader.open()
        host = HostReader()
        try:
            while not self._stop.wait(self._interval_s):
                values = host.read()
                if gpus is not None:
                    values.update(gpus.read())
                values["system/process_rss_gb"] = _process_rss_gb()
                if values["system/process_rss_gb"] != values["system/process_rss_gb"]:
                    del values["system/process_rss_gb"]
                if values:
                    self._sink(values)
        finally:
            if gpus is not None:
                gpus.close()


def _process_rss_gb() -> float:
    """This process's resident memory (Linux), NaN elsewhere."""
    try:
        with open(f"/proc/{os.getpid()}/statm") as handle:
            pages = int(handle.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / GIB
    except (OSError, ValueError, IndexError):
        return float("nan")
