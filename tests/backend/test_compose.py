"""docker-compose.yml is valid (checked with Debian's docker-compose; no engine runs here)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _compose(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("docker-compose")
    if tool is None:
        pytest.fail("docker-compose is missing: run `make services` (installs Debian's package)")
    return subprocess.run(
        [tool, "-f", str(ROOT / "docker-compose.yml"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )


def test_compose_file_is_valid() -> None:
    result = _compose("config", "-q")
    assert result.returncode == 0, result.stderr


def test_compose_services_and_demo_profile() -> None:
    import yaml

    services = yaml.safe_load(_compose("config").stdout)["services"]
    assert set(services) == {"postgres", "migrate", "backend", "proxy", "frontend", "demo-trainer"}
    assert services["demo-trainer"]["profiles"] == ["demo"]
    assert "postgres" in services["backend"]["environment"]["RLGUARD_DATABASE_URL"]
    assert "http://proxy:8000/api" in services["frontend"]["command"]


def test_compose_migrates_once_then_starts_replicas_behind_the_proxy() -> None:
    import yaml

    services = yaml.safe_load(_compose("config").stdout)["services"]
    assert services["migrate"]["command"] == ["rlguard", "db", "upgrade"]
    backend = services["backend"]
    assert backend["environment"]["RLGUARD_MIGRATE_ON_START"] == "false"
    assert backend["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert backend["deploy"]["replicas"] == 2
    assert "ports" not in backend, "only the proxy publishes a port"
    proxy = services["proxy"]
    assert proxy["image"].startswith("nginx:")
    assert any(v.endswith("/etc/nginx/nginx.conf:ro") for v in _volumes(proxy))
    assert proxy["depends_on"]["backend"]["condition"] == "service_healthy"
    assert "healthcheck" in backend and "healthcheck" in proxy


def _volumes(service: dict) -> list[str]:
    return [
        v if isinstance(v, str) else f"{v['source']}:{v['target']}:ro" for v in service["volumes"]
    ]
