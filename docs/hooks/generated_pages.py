"""MkDocs hook: the pages whose content comes from elsewhere, filled in at build time.

A page holds a marker comment and the hook replaces it, so every page is a real file under
docs/ (links to it resolve on GitHub and in the link test alike):

- ``<!-- generated: rest-api -->``: the REST endpoints, rendered from the service's own OpenAPI
  schema (``create_app(...).openapi()``; nothing connects, no network) with the scope each
  route declares (``main.access_table``).
- ``<!-- generated: detector ID -->``: detector ID's alert keys (``stability.RULES``: the
  signals each reads, persistence, clear rule, advice), its thresholds (``DEFAULTS``, with the
  note written beside each in thresholds.py) and the messages it gave on the synthetic
  scenario table of tests/detectors/scenarios.py (seed 0), run through ``DetectorSuite``.
- ``<!-- include: CONTRIBUTING.md -->``: a file from the repository root, its links to ``docs/``
  rewritten to be relative to the site.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import sys
import tempfile
import tokenize
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
REST_MARKER = "<!-- generated: rest-api -->"
DETECTOR_MARKER = re.compile(r"<!-- generated: detector ([a-z_]+) -->")
INCLUDE = re.compile(r"<!-- include: ([A-Za-z0-9_.-]+\.md) -->")
ROOT_PAGES = {"CONTRIBUTING.md": "contributing.md", "CHANGELOG.md": "changelog.md"}


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Fill a page's markers; pages without one pass through unchanged."""
    if REST_MARKER in markdown:
        markdown = markdown.replace(REST_MARKER, render_rest_reference(openapi_schema()))
    markdown = DETECTOR_MARKER.sub(lambda match: render_detector(match.group(1)), markdown)
    return INCLUDE.sub(lambda match: included(match.group(1)), markdown)


def included(name: str) -> str:
    """A root file's text with links into ``docs/`` (and to the other root pages) made relative."""
    text = (ROOT / name).read_text()
    text = re.sub(r"\]\(docs/", "](", text)
    for root_name, page in ROOT_PAGES.items():
        text = text.replace(f"]({root_name}", f"]({page}")
    return text


def openapi_schema() -> dict[str, Any]:
    """The service's OpenAPI document, from an app on a database it never opens."""
    from rlguard_backend.core.app import create_app
    from rlguard_backend.core.config import Settings

    with tempfile.TemporaryDirectory() as folder:
        settings = Settings(database_url=f"sqlite:///{folder}/unused.db", migrate_on_start=False)
        app = create_app(settings)
        schema: dict[str, Any] = app.openapi()
        app.state.engine.dispose()
    return schema


def render_rest_reference(schema: dict[str, Any]) -> str:
    """Markdown for every endpoint: scope, parameters, body, answer and error statuses."""
    from rlguard_backend.core.app import access_table

    scopes = access_table()
    errors: dict[str, str] = {}
    sections = []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            scope = scopes.get((method.upper(), path), "?")
            sections.append(_endpoint(method.upper(), path, operation, scope, errors))
    error_rows = [f"| {code} | {text} |" for code, text in sorted(errors.items())]
    return "\n".join(
        [
            f"Generated from the OpenAPI schema of rlguard {schema['info']['version']}; "
            "the running service serves the same document at `/openapi.json` "
            "and an interactive form at `/docs`.",
            "",
            "### Error statuses",
            "",
            'Every error answers JSON `{"detail": ...}` (422: a list naming each bad field\'s '
            "`loc`).",
            "",
            "| status | meaning |",
            "|---|---|",
            *error_rows,
            "",
            *sections,
            "### Models",
            "",
            "The request and response bodies named above (`rlguard_backend.schemas`).",
            "",
            *(
                _model(name, model)
                for name, model in sorted(schema["components"]["schemas"].items())
            ),
        ]
    )


def _model(name: str, model: dict[str, Any]) -> str:
    lines = [f"#### `{name}`", ""]
    if model.get("description"):
        lines += [_one_paragraph(model["description"]), ""]
    properties = model.get("properties", {})
    if properties:
        required = set(model.get("required", ()))
        lines += ["| field | type | default | meaning |", "|---|---|---|---|"]
        for field, schema in properties.items():
            shown = "(required)" if field in required else _default(schema)
            lines.append(
                f"| `{field}` | {_type(schema)} | {_cell(shown)} | "
                f"{_cell(schema.get('description', ''))} |"
            )
    elif model.get("type") or model.get("additionalProperties"):
        lines.append(f"Type: {_type(model)}.")
    return "\n".join(lines) + "\n"


def _endpoint(
    method: str, path: str, operation: dict[str, Any], scope: str, errors: dict[str, str]
) -> str:
    lines = [f"### `{method} {path}`", "", f"**{operation.get('summary', '')}** · scope `{scope}`"]
    if operation.get("description"):
        lines += ["", _one_paragraph(operation["description"])]
    parameters = operation.get("parameters", [])
    if parameters:
        lines += ["", "| parameter | in | type | default | meaning |", "|---|---|---|---|---|"]
        lines += [_parameter_row(parameter) for parameter in parameters]
    body = operation.get("requestBody", {}).get("content", {})
    for media, content in body.items():
        lines += ["", f"Body ({media}): {_type(content.get('schema', {}))}."]
    answers, failures = [], []
    for code, response in operation["responses"].items():
        if code.startswith("2"):
            content = response.get("content", {})
            media = next(iter(content), None)
            what = _type(content[media].get("schema", {})) if media else "no body"
            answers.append(f"{code} {what}")
        else:
            errors.setdefault(code, response.get("description", ""))
            failures.append(code)
    lines += ["", f"Answers: {'; '.join(answers)}. Errors: {', '.join(sorted(failures)) or '—'}."]
    return "\n".join(lines) + "\n"


def _parameter_row(parameter: dict[str, Any]) -> str:
    schema = parameter.get("schema", {})
    description = parameter.get("description") or schema.get("description") or ""
    required = " (required)" if parameter.get("required") else ""
    return (
        f"| `{parameter['name']}`{required} | {parameter['in']} | {_type(schema)} | "
        f"{_default(schema)} | {_cell(description)} |"
    )


def _default(schema: dict[str, Any]) -> str:
    return "" if schema.get("default") is None else f"`{json.dumps(schema['default'])}`"


def _type(schema: dict[str, Any]) -> str:
    """A JSON schema in a few words: ``RunPublic``, ``integer ≥ 1``, ``running | finished``."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[`{name}`](#{name.lower()})"  # its entry under Models
    if "anyOf" in schema:
        kinds = [option for option in schema["anyOf"] if option.get("type") != "null"]
        optional = len(kinds) < len(schema["anyOf"])
        text = " or ".join(_type(option) for option in kinds)
        return f"{text} (or null)" if optional and text else text or "null"
    if "enum" in schema:
        return " \\| ".join(f"`{value}`" for value in schema["enum"])
    if schema.get("type") == "array":
        return f"list of {_type(schema.get('items', {}))}"
    if isinstance(schema.get("additionalProperties"), dict):
        return f"object of {_type(schema['additionalProperties'])}"
    text = str(schema.get("type", "any"))
    bounds = [
        f"{sign} {schema[key]}"
        for key, sign in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"))
        if key in schema
    ]
    return " ".join([text, *bounds])


def _one_paragraph(text: str) -> str:
    return " ".join(text.split())


def _cell(text: str) -> str:
    return _one_paragraph(text).replace("|", "\\|")


def render_detector(detector_id: str) -> str:
    """Alert keys, thresholds and example messages of one detector (``common``: thresholds)."""
    from rlguard_backend.stability import DEFAULTS, DETECTOR_TYPES

    thresholds = DEFAULTS[detector_id]
    notes = threshold_notes()
    lines = []
    detector = next((d for d in DETECTOR_TYPES if d.id == detector_id), None)
    if detector is not None:
        lines += [
            "| alert key | reads | steps in a row | clears after | advice |",
            "|---|---|---|---|---|",
        ]
        for rule in detector.rules:
            advice = "" if callable(rule.advice) else " ".join(rule.advice)
            signals = ", ".join(f"`{signal}`" for signal in rule.signals) or "the run config"
            fires_once = any(condition.__name__ == "never" for condition in rule.clears)
            clear = "never (fires once)" if fires_once else _steps(rule.clear_steps, thresholds)
            lines.append(
                f"| `{rule.key}` | {signals} | {_steps(rule.persistence, thresholds, one='—')} | "
                f"{clear} | {_cell(advice)} |"
            )
        lines.append("")
    lines += [
        f"Thresholds (`{detector_id}.<name>`):",
        "",
        "| name | default | note |",
        "|---|---|---|",
        *(
            f"| `{name}` | {value:g} | {_cell(notes.get((detector_id, name), ''))} |"
            for name, value in thresholds.items()
        ),
    ]
    examples = [
        f"- {severity.upper()} `{key}` (scenario {scenario}, step {step}): {_one_paragraph(text)}"
        for (found, key, severity), (scenario, step, text) in sorted(scenario_messages().items())
        if found == detector_id
    ]
    if examples:
        lines += ["", "Messages it gave on the synthetic scenarios (seed 0):", "", *examples]
    return "\n".join(lines) + "\n"


def _steps(limit: str | int, thresholds: dict[str, float], one: str = "1 step") -> str:
    """A rule's step count and the threshold that sets it (``one`` for a plain 1)."""
    count = thresholds[limit] if isinstance(limit, str) else limit
    if count == 1 and not isinstance(limit, str):
        return one
    steps = f"{count:g} step" + ("" if count == 1 else "s")
    return f"{steps} (`{limit}`)" if isinstance(limit, str) else steps


@functools.cache
def threshold_notes() -> dict[tuple[str, str], str]:
    """The comment written beside each threshold in thresholds.py, by (detector, name)."""
    from rlguard_backend.stability import thresholds

    path = Path(thresholds.__file__)
    comments = {}
    with path.open("rb") as source:
        for token in tokenize.tokenize(source.readline):
            if token.type == tokenize.COMMENT:
                comments[token.start[0]] = token.string.lstrip("# ").strip()
    notes = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "DEFAULTS":
            assert isinstance(node.value, ast.Dict)
            for group, table in zip(node.value.keys, node.value.values, strict=True):
                assert isinstance(group, ast.Constant) and isinstance(table, ast.Dict)
                for key in table.keys:
                    assert isinstance(key, ast.Constant)
                    if key.lineno in comments:
                        notes[(group.value, key.value)] = comments[key.lineno]
    return notes


@functools.cache
def scenario_messages() -> dict[tuple[str, str, str], tuple[str, int, str]]:
    """The first message per (detector, key, severity) over the synthetic scenarios, seed 0."""
    sys.path.insert(0, str(ROOT))
    try:
        from tests.detectors.scenarios import SCENARIOS
    finally:
        sys.path.remove(str(ROOT))
    from rlguard_backend.stability import DetectorSuite

    found: dict[tuple[str, str, str], tuple[str, int, str]] = {}
    for scenario in SCENARIOS:
        suite = DetectorSuite(scenario.config)
        for step, values in scenario.run(0):
            for event in suite.feed(step, values):
                key = (event.detector, event.key, str(event.severity))
                if str(event.action).endswith(("open", "escalate")) and key not in found:
                    found[key] = (scenario.name, event.last_step, event.message)
    return found
