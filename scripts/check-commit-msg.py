"""Refuse a commit message whose subject is empty or longer than 72 characters.

Git's ``commit-msg`` hook (installed by ``pre-commit install``, see .pre-commit-config.yaml)
runs it on the message file; ``python scripts/check-commit-msg.py FILE`` checks any message.
The rules are git's own convention: a subject of at most 72 characters that says what changed,
then a blank line, then a body with the reasons and the figures. Lines git strips itself
(``#`` comments, everything below the ``--verbose`` scissors line) are not counted.
"""

from __future__ import annotations

import sys
from pathlib import Path

MAX_SUBJECT_CHARS = 72
SCISSORS = "# ------------------------ >8 ------------------------"


def message_lines(text: str) -> list[str]:
    """The message as git will store it: no comments, no diff below the scissors, no blank top."""
    lines = []
    for line in text.splitlines():
        if line == SCISSORS:
            break
        if not line.startswith("#"):
            lines.append(line.rstrip())
    while lines and not lines[0]:
        lines.pop(0)
    return lines


def problems(text: str) -> list[str]:
    """What is wrong with a commit message, each with its fix; empty when it is fine."""
    lines = message_lines(text)
    if not lines:
        return ["the message is empty: write a subject that says what changed"]
    subject, found = lines[0], []
    if len(subject) > MAX_SUBJECT_CHARS:
        found.append(
            f"the subject is {len(subject)} characters, at most {MAX_SUBJECT_CHARS}: say what "
            "changed in the subject, and move figures and reasons to the body"
        )
    if len(lines) > 1 and lines[1]:
        found.append("the second line is not blank: leave one blank line between subject and body")
    return found


def main(argv: list[str]) -> int:
    """Check the message file git passes; print each problem and fail, or pass silently."""
    if len(argv) != 1:
        print("usage: check-commit-msg.py MESSAGE_FILE", file=sys.stderr)
        return 2
    found = problems(Path(argv[0]).read_text(encoding="utf-8", errors="replace"))
    for problem in found:
        print(f"commit message: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
