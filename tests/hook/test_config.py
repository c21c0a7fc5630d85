"""HookConfig: kwargs > RLGUARD_* env > defaults; bad values raise at init() naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

import rlguard
from rlguard._config import load_config
from rlguard.protocol import RUN_ID


def test_config_defaults_generate_a_valid_run_id() -> None:
    cfg = load_config(environ={})
    assert cfg.url == "http://127.0.0.1:8000"
    assert cfg.project == "default"
    assert RUN_ID.fullmatch(cfg.run_id)
    assert load_config(environ={}).run_id != cfg.run_id


def test_config_env_overrides_defaults_and_kwargs_override_env() -> None:
    env = {
        "RLGUARD_URL": "http://svc:9000/",
        "RLGUARD_PROJECT": "from-env",
        "RLGUARD_TAGS": "a, b",
        "RLGUARD_GPU": "0",
        "RLGUARD_SPOOL_BUDGET_MB": "5",
        "RLGUARD_CONFIG": '{"kl_coef": 0.001}',
    }
    cfg = load_config(environ=env, project="from-kwargs")
    assert (cfg.url, cfg.project, cfg.tags, cfg.gpu) == (
        "http://svc:9000",
        "from-kwargs",
        ("a", "b"),
        False,
    )
    assert cfg.spool_budget_bytes == 5 * 1024 * 1024
    assert cfg.config == {"kl_coef": 0.001}


@pytest.mark.parametrize(
    ("kwargs", "env", "named"),
    [
        ({"run_id": "has space"}, {}, "run_id='has space'"),
        ({"url": "localhost:8000"}, {}, "url='localhost:8000'"),
        ({"flush_interval_s": -1}, {}, "flush_interval_s=-1"),
        ({"tags": "ok"}, {"RLGUARD_TAGS": ""}, None),
        ({"tags": [1, 2]}, {}, "tags=[1, 2]"),
        ({"config": {"x": object()}}, {}, None),
        ({"config": [1]}, {}, "config=[1]"),
        ({"on_alert": 3}, {}, "on_alert=3"),
        ({"resume": "sometimes"}, {}, "resume='sometimes'"),
        ({"resume": "must"}, {}, "resume='must' needs run_id"),
        ({"max_queue_mb": 0}, {}, "max_queue_mb=0"),
        ({"max_samples_per_step": 1.5}, {}, "max_samples_per_step=1.5"),
        ({"project": ""}, {"RLGUARD_PROJECT": "x"}, "project=''"),
        ({}, {"RLGUARD_GPU": "maybe"}, "RLGUARD_GPU='maybe'"),
        ({}, {"RLGUARD_FLUSH_INTERVAL_S": "soon"}, "RLGUARD_FLUSH_INTERVAL_S='soon'"),
        ({"colour": "red"}, {}, "unknown argument(s) colour"),
    ],
)
def test_config_bad_value_raises_naming_the_key(kwargs: dict, env: dict, named: str | None) -> None:
    if named is None:  # these are accepted: empty env is "unset", objects in config become str
        load_config(environ=env, **kwargs)
        return
    with pytest.raises(rlguard.ConfigError) as info:
        load_config(environ=env, **kwargs)
    assert named in str(info.value)


def test_init_bad_argument_raises_at_once(spool_dir: Path) -> None:
    with pytest.raises(ValueError, match="run_id='a/b'"):
        rlguard.init(project="p", run_id="a/b", spool_dir=str(spool_dir))


def test_config_resume_never_ignores_env_run_id() -> None:
    cfg = load_config(environ={"RLGUARD_RUN_ID": "fixed"}, resume="never")
    assert cfg.run_id != "fixed"
    assert load_config(environ={"RLGUARD_RUN_ID": "fixed"}).run_id == "fixed"


@pytest.mark.parametrize(
    ("kwargs", "env"),
    [
        ({"token": "secret\nX-Injected: 1"}, {}),
        ({"token": "two secret words"}, {}),
        ({}, {"RLGUARD_TOKEN": "secret\x00"}),
    ],
)
def test_config_refuses_a_token_that_is_not_one_word_without_echoing_it(
    kwargs: dict, env: dict
) -> None:
    with pytest.raises(rlguard.ConfigError) as info:
        load_config(environ=env, **kwargs)
    assert "token" in str(info.value) and "secret" not in str(info.value)
    assert load_config(environ={"RLGUARD_TOKEN": " abc.def-123\n"}).token == "abc.def-123"


def test_config_repr_hides_the_token() -> None:
    assert "secret" not in repr(load_config(environ={}, token="secret"))
