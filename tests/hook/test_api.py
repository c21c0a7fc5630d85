"""The public surface: a sorted __all__, stdlib-only import, rank selection, init/log/finish."""

from __future__ import annotations

import subprocess
import sys

import pytest

import rlguard
from rlguard._rank import global_rank
from tests.hook.hookutil import child_env


def test_all_is_sorted_and_complete() -> None:
    assert rlguard.__all__ == sorted(rlguard.__all__)
    public = {name for name in vars(rlguard) if not name.startswith("_")}
    assert set(rlguard.__all__) <= public


def test_import_uses_the_standard_library_only() -> None:
    code = (
        "import sys, rlguard, rlguard.errors;"
        "heavy = {'numpy', 'torch', 'pynvml', 'requests', 'httpx', 'psutil', 'rlguard_backend'};"
        "print(sorted(heavy & set(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=child_env(),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("env", "rank"),
    [
        ({}, 0),
        ({"RANK": "3"}, 3),
        ({"LOCAL_RANK": "1"}, 1),
        ({"RANK": "0", "LOCAL_RANK": "5"}, 0),
        ({"RANK": ""}, 0),
    ],
)
def test_rank_from_environment(env: dict[str, str], rank: int) -> None:
    assert global_rank(env) == rank


def test_init_on_nonzero_rank_logs_nothing(monkeypatch: pytest.MonkeyPatch, spool_dir) -> None:
    monkeypatch.setenv("RANK", "2")
    run = rlguard.init(project="p", url="http://127.0.0.1:9", spool_dir=str(spool_dir), gpu=False)
    run.log({"a": 1.0}, step=0)
    assert not run.active
    assert run.finish() == rlguard.RunStatus(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, None)
    assert not spool_dir.exists()


def test_init_all_ranks_when_told(monkeypatch: pytest.MonkeyPatch, spool_dir) -> None:
    monkeypatch.setenv("RANK", "2")
    run = rlguard.init(
        project="p",
        url="http://127.0.0.1:9",
        spool_dir=str(spool_dir),
        gpu=False,
        rank_zero_only=False,
        finish_timeout_s=0,
    )
    assert run.active
    run.finish()


def test_rank_from_initialised_torch_distributed(tmp_path, monkeypatch) -> None:
    import torch.distributed as dist

    monkeypatch.setenv("RANK", "7")  # the process group's answer wins over the environment
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        assert global_rank() == 0
    finally:
        dist.destroy_process_group()


def test_log_before_init_raises() -> None:
    import rlguard._registry as registry

    saved = registry._last[:]
    registry._last.clear()
    token = registry._current.set(None)
    try:
        with pytest.raises(rlguard.RLGuardError, match=r"before rlguard\.init"):
            rlguard.log({"a": 1.0})
    finally:
        registry._current.reset(token)
        registry._last[:] = saved
