"""The version has one source, ``rlguard.__version__``; the packaging and the service read it."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

import rlguard
import rlguard_backend
import rlguard_frontend

ROOT = Path(__file__).resolve().parents[1]


def test_version_is_declared_once_and_read_everywhere() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    project = pyproject.split("\n[", 2)[1]  # the [project] table, up to the next table
    assert re.search(r"^version\s*=", project, re.MULTILINE) is None
    assert 'dynamic = ["version"]' in pyproject
    assert 'version = { attr = "rlguard.__version__" }' in pyproject
    installed = version("rlguard")
    assert rlguard.__version__ == installed, "version bumped: run `make setup` (pip install -e .)"
    assert rlguard_backend.__version__ == rlguard_frontend.__version__ == installed


def test_no_other_module_writes_a_version_literal() -> None:
    literal = re.compile(r"""^__version__\s*=\s*["']""", re.MULTILINE)
    writers = [
        path.relative_to(ROOT).as_posix()
        for folder in ("trainer_hook", "backend", "frontend")
        for path in (ROOT / folder).rglob("*.py")
        if literal.search(path.read_text())
    ]
    assert writers == ["trainer_hook/rlguard/__init__.py"]
