"""Detection on public logs: the outcome table docs/performance.md reports, pinned.

The committed excerpts (tests/data/public_logs) go through ``rlguard import`` into a real
service and its backtest, and through the two peers when installed. A change of any verdict,
first alarm step or alarming detector fails here; if the change is meant, update the table and
docs/performance.md together.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks import public_logs

# log -> (verdict, first WARN/CRITICAL step, detectors that raised WARN/CRITICAL)
# The two healthy Qwen runs were false alarms (a lone grad-norm spike, x31 and x18, was WARN)
# until a lone spike became INFO (#15 §2: a rule must not call a run's update too far when its
# KL did not move); a grad spike is WARN when it repeats or comes with a KL spike.
RLGUARD = {
    "verl-ppo-qwen2.5-0.5b-gsm8k-resp512": ("quiet", None, set()),
    "verl-ppo-qwen2.5-0.5b-gsm8k-resp256": ("quiet", None, set()),
    "verl-ppo-gemma-2-2b-gsm8k": ("quiet", None, set()),
    "trl-grpo-qwen2.5-vl-3b-collapse": (
        "true_positive",
        50,
        {"no_learning_signal", "length", "entropy_collapse"},
    ),
    "verl-grpo-agent-r1-nan": ("true_positive", 83, {"nonfinite"}),
    "verl-grpo-issue-721-nan": ("true_positive", 59, {"nonfinite"}),
    "ms-swift-grpo-issue-5890-zero-grad": ("missed", None, set()),
    "trl-grpo-open-r1-issue-255-format-hack": ("missed", None, set()),
}
RLWATCH = {
    "verl-ppo-qwen2.5-0.5b-gsm8k-resp512": ("quiet", None, set()),
    "verl-ppo-qwen2.5-0.5b-gsm8k-resp256": ("quiet", None, set()),
    "verl-ppo-gemma-2-2b-gsm8k": ("quiet", None, set()),
    "trl-grpo-qwen2.5-vl-3b-collapse": ("true_positive", 440, {"entropy_collapse"}),
    "verl-grpo-agent-r1-nan": ("missed", None, set()),
    "verl-grpo-issue-721-nan": ("missed", None, set()),
    "ms-swift-grpo-issue-5890-zero-grad": ("missed", None, set()),
    "trl-grpo-open-r1-issue-255-format-hack": ("missed", None, set()),
}
RLWATCH_VERL_KEYS = {
    "verl-ppo-qwen2.5-0.5b-gsm8k-resp512": ("false_alarm", 43, {"entropy_collapse"}),
    "verl-ppo-qwen2.5-0.5b-gsm8k-resp256": (
        "false_alarm",
        19,
        {"entropy_collapse", "gradient_norm_spike", "kl_explosion"},
    ),
    "verl-ppo-gemma-2-2b-gsm8k": ("false_alarm", 43, {"entropy_collapse", "gradient_norm_spike"}),
    "trl-grpo-qwen2.5-vl-3b-collapse": ("true_positive", 440, {"entropy_collapse"}),
    "verl-grpo-agent-r1-nan": ("true_positive", 83, {"loss_nan"}),
    "verl-grpo-issue-721-nan": ("true_positive", 59, {"loss_nan"}),
    "ms-swift-grpo-issue-5890-zero-grad": ("missed", None, set()),
    "trl-grpo-open-r1-issue-255-format-hack": ("missed", None, set()),
}
RL_DOCTOR = {
    "verl-ppo-qwen2.5-0.5b-gsm8k-resp512": (
        "false_alarm",
        149,
        {"entropy_collapse", "gradient_pathology"},
    ),
    "verl-ppo-qwen2.5-0.5b-gsm8k-resp256": (
        "false_alarm",
        74,
        {"entropy_collapse", "gradient_pathology"},
    ),
    "verl-ppo-gemma-2-2b-gsm8k": ("false_alarm", 73, {"gradient_pathology"}),
    "trl-grpo-qwen2.5-vl-3b-collapse": (
        "true_positive",
        None,
        {"advantage_collapse", "entropy_collapse", "gradient_pathology", "plateau"},
    ),
    "verl-grpo-agent-r1-nan": ("missed", None, set()),
    "verl-grpo-issue-721-nan": ("missed", None, set()),
    "ms-swift-grpo-issue-5890-zero-grad": ("missed", None, set()),
    "trl-grpo-open-r1-issue-255-format-hack": ("missed", None, set()),
}


@pytest.fixture(scope="module")
def evaluation() -> dict[str, Any]:
    return public_logs.run(public_logs.load_cases())


def _table(evaluation: dict[str, Any], tool: str) -> dict[str, tuple[str, int | None, set[str]]]:
    table = {}
    for row in evaluation["logs"]:
        found = row[tool]
        alarming = {
            alert["detector"]
            for alert in found["alerts"]
            if alert["severity"] in public_logs.ALARM_SEVERITIES
        }
        table[row["log"]] = (found["verdict"], found["first_alarm_step"], alarming)
    return table


def test_rlguard_outcome_on_public_logs_is_the_reported_one(evaluation: dict[str, Any]) -> None:
    assert _table(evaluation, "rlguard") == RLGUARD
    for row in evaluation["logs"]:  # every excerpt imported whole, with a clean exit
        assert row["rlguard"]["import_exit_status"] == 0, row["rlguard"]["import_said"]
        assert row["rlguard"]["steps"] == len({step for step, _ in _records(row["log"])})
    assert evaluation["summary"]["rlguard"] | {"lead_steps": None} == {
        "failing_runs": 5,
        "detected": 3,
        "detected_by_the_matching_detector": 3,
        "healthy_runs": 3,
        "false_alarms": 0,
        "lead_steps": None,
    }
    assert evaluation["summary"]["rlguard"]["lead_steps"] == [-30, 0, 0]


def test_peer_outcomes_on_public_logs_are_the_reported_ones(evaluation: dict[str, Any]) -> None:
    pytest.importorskip("rlwatch")
    pytest.importorskip("rl_doctor")
    assert evaluation["peers"] == {"rlwatch": "0.5.1", "rldoctor": "0.2.0"}
    assert _table(evaluation, "rlwatch") == RLWATCH
    assert _table(evaluation, "rlwatch_verl_keys") == RLWATCH_VERL_KEYS
    assert _table(evaluation, "rl_doctor") == RL_DOCTOR


def _records(name: str) -> list[tuple[int, dict[str, Any]]]:
    [case] = [case for case in public_logs.load_cases() if case["name"] == name]
    return public_logs.read_records(case)
