"""What the hook reads from a step's samples: repetition, degenerate responses, truncation."""

from __future__ import annotations

import ast
import codecs
import subprocess
import sys
import this
from pathlib import Path

import pytest

from rlguard.sample_signals import (
    DEGENERATE,
    REPETITION,
    TRUNCATED,
    SampleSignals,
    is_degenerate,
    repetition_rate,
    step_signals,
)
from tests.hook.hookutil import child_env

ZEN = codecs.decode(this.s, "rot13")  # human text that ships with Python


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("now " * 40, 1 - 1 / 37),  # one 4-gram, 37 times
        ("a b c d " * 10, 1 - 4 / 37),  # four 4-grams around a loop
        ("one two three four five six seven", None),  # under 8 words: not judged
        (" ".join(str(i) for i in range(50)), 0.0),
    ],
)
def test_repetition_rate_is_the_share_of_repeated_4_grams(text: str, rate: float | None) -> None:
    assert repetition_rate(text.split()) == (None if rate is None else pytest.approx(rate))


def test_repetition_rate_of_human_text_is_about_welleck_s_human_level() -> None:
    rate = repetition_rate(ZEN.split())
    assert rate is not None and rate < 0.02  # seq-rep-4 of human text: ~0.006


@pytest.mark.parametrize(
    ("text", "malformed", "degenerate"),
    [
        ("", False, True),
        ("   \n", False, True),
        ("The answer is 4.", False, False),
        ("!!!!!!!!!!!!!!!!!!!!!!!!", False, True),  # verl#721: outputs become "!!!!"
        ("ok \ufffd\ufffd", False, True),  # bytes that did not decode
        ("$$ \\frac{1}{2} + x_1 = y $$", False, False),  # maths is not symbol soup
        ("fine text", True, True),  # the trainer's own format check
        ("!!", False, False),  # too short to judge by its letters
    ],
)
def test_is_degenerate(text: str, malformed: bool, degenerate: bool) -> None:
    assert is_degenerate(text, malformed) is degenerate


def test_sample_signals_per_step_over_every_train_sample_and_calls_add_up() -> None:
    signals = SampleSignals()
    loop = {"response": "now " * 40, "truncated": True}
    clean = {"response": ZEN, "truncated": 0.0}
    first = signals.read([(3, 0.0, [loop, clean, clean, clean], "train")])
    assert first == {
        3: {
            TRUNCATED: 0.25,
            REPETITION: pytest.approx((1 - 1 / 37 + 3 * repetition_rate(ZEN.split())) / 4),
            DEGENERATE: 0.0,
        }
    }
    # a second call at step 3 (a later drain) re-logs the step with both calls' samples
    again = signals.read([(3, 0.0, [{"response": ""}, "junk"], "train")])
    assert again[3][DEGENERATE] == 1 / 5 and again[3][TRUNCATED] == 0.25
    # other splits and invalid steps say nothing; a new step starts afresh
    assert signals.read([(4, 0.0, [loop], "validation"), (-1, 0.0, [loop], "train")]) == {}
    assert signals.read([(5, 0.0, [{"response": "x"}], "train")]) == {5: {DEGENERATE: 0.0}}


def test_sample_signals_read_a_bounded_number_of_texts_per_call() -> None:
    signals = SampleSignals()
    records = [{"response": ""} if i % 2 else {"response": "fine"} for i in range(1000)]
    values = signals.read([(0, 0.0, records, "train")])[0]
    assert values == {DEGENERATE: pytest.approx(0.5, abs=0.2)}  # 64 of them, at random
    assert values[DEGENERATE] not in (0.0, 1.0)  # not every other one


def test_step_signals_read_one_step_as_the_hook_s_sender_does() -> None:
    records = [{"response": "now " * 40, "truncated": True}, {"response": "", "truncated": 0}]
    by_drain = SampleSignals().read([(7, 0.0, records, "train")])
    assert (
        step_signals(records)
        == by_drain[7]
        == {
            TRUNCATED: 0.5,
            REPETITION: pytest.approx(1 - 1 / 37),
            DEGENERATE: 0.5,
        }
    )


def test_sample_signals_import_the_standard_library_only() -> None:
    code = (
        "import sys, rlguard.sample_signals;"
        "heavy = {'numpy', 'torch', 'pydantic', 'sqlalchemy', 'rlguard_backend'};"
        "print(sorted(heavy & set(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_the_service_imports_only_the_public_protocol_and_sample_signals_from_the_hook() -> None:
    backend = Path(__file__).resolve().parents[2] / "backend" / "rlguard_backend"
    imported = set()
    for path in backend.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            imported |= {name for name in names if name.split(".")[0] == "rlguard"}
    assert imported <= {"rlguard.protocol", "rlguard.sample_signals"}
