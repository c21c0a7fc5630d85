"""scripts/check-commit-msg.py, git's commit-msg check, run as git runs it: on a message file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "check-commit-msg.py"
SCISSORS = "# ------------------------ >8 ------------------------"

# (case, message file's text, exit status, words the refusal names)
CASES = [
    ("subject only", "Add the commit-msg check\n", 0, None),
    ("subject of exactly 72", "x" * 72 + "\n", 0, None),
    ("subject and body", "Add the check\n\nWhy, with the figures: 1.2 s.\n", 0, None),
    ("subject of 73", "x" * 73 + "\n", 1, "the subject is 73 characters, at most 72"),
    ("72 characters not bytes", "é" * 72 + "\n", 0, None),
    ("empty", "", 1, "the message is empty"),
    ("blank lines only", "\n\n  \n", 1, "the message is empty"),
    ("comments only", "# Please enter the commit message\n#\n", 1, "the message is empty"),
    ("no blank line before body", "Add the check\nWhy it matters.\n", 1, "not blank"),
    (
        "long subject and no blank line",
        "y" * 90 + "\nbody\n",
        1,
        "the subject is 90 characters",
    ),
    ("leading blank lines dropped", "\n\nAdd the check\n\nbody\n", 0, None),
    ("trailing spaces not counted", "x" * 72 + "   \n", 0, None),
    (
        "git's comments not counted",
        "Add the check\n\n# Please enter the commit message for your changes.\n# " + "z" * 90,
        0,
        None,
    ),
    (
        "below the scissors not counted",
        f"Add the check\n\nbody\n{SCISSORS}\ndiff --git a/x b/x\n" + "+" * 100 + "\n",
        0,
        None,
    ),
    (
        "a long line in the body is fine",
        "Add the check\n\n" + "the figures " * 20 + "\n",
        0,
        None,
    ),
]


def check(message_file: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(message_file)],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("text", "status", "named"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_commit_msg_check_passes_or_refuses_a_message_file(
    tmp_path: Path, text: str, status: int, named: str | None
) -> None:
    message = tmp_path / "COMMIT_EDITMSG"
    message.write_text(text, encoding="utf-8")
    result = check(message)
    assert result.returncode == status, result.stderr
    if named is None:
        assert result.stderr == ""
    else:
        assert named in result.stderr


def test_commit_msg_check_refuses_a_real_git_commit(tmp_path: Path) -> None:
    git = shutil.which("git")
    assert git is not None, "the commit-msg check is git's: git must be installed"
    repo, hooks = tmp_path / "repo", tmp_path / "hooks"
    hooks.mkdir()
    hook = hooks / "commit-msg"
    hook.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{SCRIPT}" "$1"\n')
    hook.chmod(0o755)
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
    }

    def commit(subject: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [git, "-c", f"core.hooksPath={hooks}", "commit", "--allow-empty", "-q", "-m", subject],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    subprocess.run([git, "init", "-q", str(repo)], check=True, env=env, timeout=60)
    refused, taken = commit("x" * 73), commit("Add a short subject")
    log = subprocess.run(
        [git, "log", "--format=%s"], cwd=repo, env=env, capture_output=True, text=True, timeout=60
    )
    assert (refused.returncode, taken.returncode) == (1, 0)
    assert "at most 72" in refused.stderr
    assert log.stdout.splitlines() == ["Add a short subject"]


def test_commit_msg_check_is_installed_by_pre_commit() -> None:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks = {hook["id"]: hook for repo in config["repos"] for hook in repo["hooks"]}
    assert "commit-msg" in config["default_install_hook_types"]
    assert hooks["commit-msg"]["stages"] == ["commit-msg"]
    assert hooks["commit-msg"]["entry"].endswith("scripts/check-commit-msg.py")
