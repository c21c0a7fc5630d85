"""The docs hold together: links resolve, anchors exist, the architecture page names every module.

Read from the files themselves, no network: a relative link or image must name an existing file
(and its ``#anchor`` a heading of that file, by GitHub's slug rule, which the site's toc uses
too); an http(s) link must be well-formed. MkDocs' strict build (``make docs``) checks the site's
own view of the same links.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
LINKED_FILES = sorted(
    [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *DOCS.rglob("*.md")]
)
ARCHITECTURE = DOCS / "architecture.md"
# (folder holding the package, package): paths are named relative to the folder
PACKAGES = (
    ("trainer_hook", "rlguard"),
    ("backend", "rlguard_backend"),
    ("frontend", "rlguard_frontend"),
    ("compose", "rlguard_compose"),
)

FENCE = re.compile(r"^(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


@dataclass(frozen=True)
class Link:
    source: Path
    line: int
    target: str

    def __str__(self) -> str:
        return f"{_shown(self.source)}:{self.line}: {self.target}"


def prose_lines(path: Path, blank_code: bool = True) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, with inline code blanked out (``blank_code``)."""
    lines, fenced = [], False
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, INLINE_CODE.sub("", line) if blank_code else line))
    return lines


def links_of(path: Path) -> list[Link]:
    return [
        Link(path, number, match.group(1))
        for number, line in prose_lines(path)
        for match in LINK.finditer(line)
    ]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading (``pymdownx.slugs.slugify(case="lower")`` on the site)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors_of(path: Path) -> set[str]:
    """Every heading's anchor, numbered as GitHub numbers repeats (``name``, ``name-1`` …)."""
    seen: Counter[str] = Counter()
    anchors = set()
    for _, line in prose_lines(path.resolve(), blank_code=False):
        match = HEADING.match(line)
        if match is None:
            continue
        base = slug(match.group(2))
        anchors.add(base if seen[base] == 0 else f"{base}-{seen[base]}")
        seen[base] += 1
    return anchors


def problem(link: Link) -> str | None:
    """What is wrong with one link, or None."""
    target = link.target
    if target.startswith(("http://", "https://")):
        parts = urllib.parse.urlsplit(target)
        if not parts.netloc or "." not in parts.netloc or " " in target:
            return "malformed URL"
        return None
    if target.startswith("mailto:"):
        return None
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):
        return "a scheme other than http(s) or mailto"
    path_part, _, anchor = target.partition("#")
    path_part = urllib.parse.unquote(path_part.split("?", 1)[0])
    resolved = (link.source.parent / path_part) if path_part else link.source
    if path_part.startswith("/"):
        return "an absolute path (use a relative one)"
    if not resolved.exists():
        return f"no such file {_shown(resolved)}"
    if anchor and resolved.suffix == ".md" and anchor not in anchors_of(resolved):
        return f"no heading with anchor #{anchor} in {resolved.name}"
    return None


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if ROOT in path.parents else str(path)


def test_docs_slug_follows_github_rules() -> None:
    cases = {
        "Tokens and sign-in": "tokens-and-sign-in",
        "D1 `nonfinite` — NaN / Inf": "d1-nonfinite--nan--inf",
        "Guarantees (and the test that proves each, in `tests/hook/`)": (
            "guarantees-and-the-test-that-proves-each-in-testshook"
        ),
        "Alerts that act (off by default)": "alerts-that-act-off-by-default",
    }
    assert {heading: slug(heading) for heading in cases} == cases


@pytest.mark.parametrize("path", LINKED_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_every_link_and_image_resolves(path: Path) -> None:
    broken = [f"{link} ({found})" for link in links_of(path) if (found := problem(link))]
    assert broken == []


def test_docs_link_checker_finds_broken_links(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "shot.png").write_bytes(b"")
    page.write_text(
        "# Top\n[ok](#top) [bad anchor](#nowhere) [missing](nothing-here.md) "
        "![img](images/shot.png) [web](https://example.org/x) [bad web](https://nohost) "
        "`[in code](missing.md)`\n```\n[fenced](missing.md)\n```\n"
    )
    found = {link.target: problem(link) for link in links_of(page)}
    assert found == {
        "#top": None,
        "#nowhere": "no heading with anchor #nowhere in page.md",
        "nothing-here.md": f"no such file {tmp_path / 'nothing-here.md'}",
        "images/shot.png": None,
        "https://example.org/x": None,
        "https://nohost": "malformed URL",
    }


def modules() -> list[tuple[str, tuple[str, ...]]]:
    """Every module of the packages, benchmarks/, scripts/ and migrations/, with the names that
    count as naming it on the architecture page (a package also by its folder)."""
    found: list[tuple[str, tuple[str, ...]]] = []
    for folder, package in PACKAGES:
        for path in sorted((ROOT / folder / package).rglob("*.py")):
            found.append(_names(path.relative_to(ROOT / folder).as_posix()))
    for path in sorted([*(ROOT / "benchmarks").glob("*.py"), *(ROOT / "scripts").iterdir()]):
        found.append(_names(path.relative_to(ROOT).as_posix()))
    for path in sorted((ROOT / "migrations").glob("*.py")):
        found.append(_names(path.relative_to(ROOT).as_posix()))
    return found


def _names(module: str) -> tuple[str, tuple[str, ...]]:
    if module.endswith("/__init__.py"):
        return module, (module, module.removesuffix("__init__.py"))
    return module, (module,)


def named_on_architecture_page() -> set[str]:
    return set(re.findall(r"`([^`\s]+)`", ARCHITECTURE.read_text()))


def test_docs_architecture_names_every_module() -> None:
    named = named_on_architecture_page()
    missing = [module for module, names in modules() if not named & set(names)]
    assert missing == [], "add a line for each to docs/architecture.md"


def test_docs_architecture_names_no_module_that_is_gone() -> None:
    roots = {package: ROOT / folder for folder, package in PACKAGES}
    prefixes = (*roots, "benchmarks", "scripts", "migrations")
    stale = []
    for name in sorted(named_on_architecture_page()):
        top = name.split("/", 1)[0]
        if "/" not in name or top not in prefixes:
            continue
        where = roots.get(top, ROOT) / name
        if not where.exists():
            stale.append(name)
    assert stale == []


class _SafeLoaderIgnoringTags(yaml.SafeLoader):
    """mkdocs.yml names Python objects (``!!python/…``); the nav needs none of them."""


_SafeLoaderIgnoringTags.add_multi_constructor(
    "tag:yaml.org,2002:python/", lambda loader, suffix, node: None
)


def nav_pages(entries: object) -> list[str]:
    if isinstance(entries, str):
        return [entries]
    if isinstance(entries, list):
        return [page for entry in entries for page in nav_pages(entry)]
    if isinstance(entries, dict):
        return [page for value in entries.values() for page in nav_pages(value)]
    return []


def test_docs_every_page_is_in_the_nav() -> None:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_SafeLoaderIgnoringTags)
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if "hooks" not in p.parts}
    assert sorted(pages - set(nav_pages(config["nav"]))) == [], "add them to nav in mkdocs.yml"


def test_docs_readme_stays_a_landing_page() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 350, "move the detail into docs/ and link it"


FIGURES_HEADER = "| figure | goal | peer or floor |"
MAX_FIGURE_ROW_CHARS = 120


def figures_table(text: str) -> list[str]:
    """The rows of the README's headline figures table, header and divider left out."""
    start = text.index(FIGURES_HEADER)
    end = text.find("\n\n", start)
    return text[start : None if end < 0 else end].splitlines()[2:]


def table_cells(row: str) -> list[str]:
    """A table row's cells; a pipe inside inline code does not split them."""
    blanked = INLINE_CODE.sub(lambda match: "x" * len(match.group(0)), row)
    bounds = [i for i, char in enumerate(blanked) if char == "|" and blanked[i - 1 : i] != "\\"]
    return [row[a + 1 : b].strip() for a, b in pairwise(bounds)]


def figure_row_problems(rows: list[str]) -> list[str]:
    """Rows that are not one short line of three cells: figure, goal, peer or floor."""
    found = []
    for row in rows:
        cells = table_cells(row)
        if len(cells) != 3 or not all(cells):
            found.append(f"{len(cells)} cells, want figure | goal | peer or floor: {row}")
        elif len(row) > MAX_FIGURE_ROW_CHARS:
            found.append(f"{len(row)} characters, at most {MAX_FIGURE_ROW_CHARS}: {row}")
    return found


HEX_WORD = re.compile(r"(?<![\w/.#-])[0-9a-fA-F]{7,40}(?![\w/-])")


def commit_hashes(text: str, is_commit: Callable[[str], bool]) -> list[str]:
    """Words of 7-40 hex digits that look like a commit hash (digits and letters both) or name
    one of the repository's commits."""
    found = []
    for word in HEX_WORD.findall(text):
        mixed = any(c.isdigit() for c in word) and any(c.isalpha() for c in word)
        if mixed or is_commit(word):
            found.append(word)
    return found


def is_repository_commit(word: str) -> bool:
    """Whether ``word`` names a commit of this checkout (False outside a git checkout)."""
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        return False
    found = subprocess.run(
        [git, "rev-parse", "--verify", "--quiet", f"{word}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )
    return found.returncode == 0


def test_docs_readme_figures_table_is_one_short_line_a_row() -> None:
    rows = figures_table((ROOT / "README.md").read_text())
    assert len(rows) >= 10
    assert figure_row_problems(rows) == [], "one figure a row; how it was won: docs/performance.md"


def test_docs_readme_figure_row_check_finds_long_and_wrong_rows() -> None:
    rows = [
        "| `log()`: **0.6 µs** | ≤ 1 µs | TensorBoard: 572 µs |",
        "| `a | b` in code: **1 s** | ≤ 2 s | — |",
        "| two cells | ≤ 1 s |",
        "| four | cells | in | a row |",
        "| an empty goal | | — |",
        "| " + "long " * 30 + "| ≤ 1 s | — |",
    ]
    assert [problem.split(":")[0] for problem in figure_row_problems(rows)] == [
        "2 cells, want figure | goal | peer or floor",
        "4 cells, want figure | goal | peer or floor",
        "3 cells, want figure | goal | peer or floor",
        "165 characters, at most 120",
    ]


def test_docs_readme_names_no_commit_hash() -> None:
    text = (ROOT / "README.md").read_text()
    assert commit_hashes(text, is_repository_commit) == [], "dated history: docs/performance.md"


def test_docs_commit_hash_check_finds_hashes_and_spares_words() -> None:
    text = (
        "beside 4510cd4 in the same session; against 3B58169; "
        f"{'a1' * 20}; faded decade 2026-12-02 1,058,400 #ff00aa 0x1f2e3d4c5b 1234567 defaced"
    )
    real = {"1234567"}
    assert commit_hashes(text, real.__contains__) == ["4510cd4", "3B58169", "a1" * 20, "1234567"]


def test_docs_readme_links_the_one_table_of_input_limits() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "| what | limit (default) | setting | answer |" not in readme, "it lives in reliability"
    assert "(docs/reliability.md#input-limits)" in readme
    assert "| what | limit (default) | setting | answer |" in (DOCS / "reliability.md").read_text()


def test_docs_cli_help_says_what_the_tool_does() -> None:
    from rlguard.cli import build_parser

    help_text = " ".join(build_parser([]).format_help().split())
    assert "Live stability monitor for RL fine-tuning of language models" in help_text
    assert "module" not in help_text, "implementation notes go in comments"


def test_docs_getting_started_shows_the_run_line_the_hook_prints() -> None:
    """The line under "Log a run" is the one ``init()`` prints for that section's own example:
    built by the hook's code from the example's project and the line's generated id."""
    from rlguard._config import DEFAULT_URL, HookConfig
    from rlguard._run import Run

    text = (DOCS / "getting-started.md").read_text()
    section = text.split("## Log a run", 1)[1].split("\n## ", 1)[0]
    [project] = re.findall(r'rlguard\.init\(project="([^"]+)"', section)
    [shown] = [line for line in section.splitlines() if line.startswith("rlguard: ")]
    [run_id] = set(re.findall(r"\b\d{8}-\d{6}-[0-9a-f]{8}\b", shown))
    run = Run(HookConfig(project=project, run_id=run_id, url=DEFAULT_URL), active=False)
    assert shown == run.location_line()
