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
    assert set(services) == {"postgres", "backend", "frontend", "demo-trainer"}
    assert services["demo-trainer"]["profiles"] == ["demo"]
    assert "postgres" in services["backend"]["environment"]["RLGUARD_DATABASE_URL"]
    assert "http://backend:8000/api" in services["frontend"]["command"]
