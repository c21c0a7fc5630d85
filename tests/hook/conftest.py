"""Fixtures of the hook tests; the helpers behind them live in hookutil.py."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hook.hookutil import FaultProxy, ServiceProcess


@pytest.fixture(scope="session")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    """One real service for the tests that only need a healthy one (each uses its own run ids)."""
    proc = ServiceProcess(tmp_path_factory.mktemp("service") / "rlguard.db").start()
    yield proc
    proc.stop()


@pytest.fixture
def run_id() -> str:
    return "test-" + uuid.uuid4().hex[:12]


@pytest.fixture
def spool_dir(tmp_path: Path) -> Path:
    return tmp_path / "spool"


@pytest.fixture(autouse=True)
def _no_rlguard_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("RLGUARD_"):
            monkeypatch.delenv(key)


@pytest.fixture
def proxy(service: ServiceProcess) -> Iterator[FaultProxy]:
    fault_proxy = FaultProxy(service.url)
    yield fault_proxy
    fault_proxy.close()
