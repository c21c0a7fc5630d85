"""OpenAPI links: which answer's ids the next operations take (a run created, then its batches,
series and alerts; a project listed, then archived). Clients read them as documentation, and
schemathesis's stateful phase follows them to reach past "unknown run" into the handlers.

Each link is written once here, by method and path under the API prefix, and added to the
document when it is built (operation ids carry the prefix, so they are found there)."""

from __future__ import annotations

from typing import Any

RUN = "/v1/runs/{run_id}"
ALERT = "/v1/alerts/{alert_id}"
PROJECT = "/v1/projects/{project}"
# What a run id reaches: every operation under /runs/{run_id}.
RUN_TARGETS = (
    ("GET", RUN),
    ("PATCH", RUN),
    ("GET", f"{RUN}/markers"),
    ("POST", f"{RUN}/heartbeat"),
    ("POST", f"{RUN}/archive"),
    ("DELETE", f"{RUN}/archive"),
    ("POST", f"{RUN}/batches"),
    ("POST", f"{RUN}/samples"),
    ("POST", f"{RUN}/detect"),
    ("POST", f"{RUN}/rewind"),
    ("GET", f"{RUN}/keys"),
    ("GET", f"{RUN}/series"),
    ("GET", f"{RUN}/export"),
    ("GET", f"{RUN}/samples"),
    ("GET", f"{RUN}/sample-steps"),
    ("GET", f"{RUN}/alerts"),
    ("POST", f"{RUN}/stop"),
    ("POST", f"{RUN}/checkpoint"),
    ("GET", f"{RUN}/commands"),
    ("DELETE", RUN),
)
ALERT_TARGETS = (("GET", ALERT), ("PATCH", ALERT), ("GET", f"{ALERT}/samples"))
PROJECT_TARGETS = (
    ("DELETE", PROJECT),
    ("POST", f"{PROJECT}/archive"),
    ("DELETE", f"{PROJECT}/archive"),
    ("GET", f"{PROJECT}/policies"),
    ("POST", f"{PROJECT}/policies"),
    ("POST", f"{PROJECT}/policy-backtest"),
)
COMMAND_TARGETS = (("PATCH", f"{RUN}/commands/{{command_id}}"),)
POLICY_TARGETS = (("DELETE", f"{PROJECT}/policies/{{policy_id}}"),)
HOOK = "/v1/webhooks/{hook_id}"
HOOK_TARGETS = (("GET", HOOK), ("PATCH", HOOK), ("DELETE", HOOK), ("POST", f"{HOOK}/test"))
READ_RUNS = (("GET", "/v1/series"), ("GET", "/v1/groups"))

# (source method, path, statuses) -> (targets, parameter, where its value is in the answer)
LINKS: list[tuple[tuple[str, str, tuple[str, ...]], tuple[tuple[str, str], ...], str, str]] = [
    (("POST", "/v1/runs", ("201", "200")), RUN_TARGETS, "run_id", "$response.body#/id"),
    (("POST", "/v1/runs", ("201", "200")), READ_RUNS, "runs", "$response.body#/id"),
    (("GET", "/v1/runs", ("200",)), RUN_TARGETS, "run_id", "$response.body#/data/0/id"),
    (
        ("POST", f"{RUN}/batches", ("200",)),
        ALERT_TARGETS,
        "alert_id",
        "$response.body#/alerts/0/id",
    ),
    (("GET", f"{RUN}/alerts", ("200",)), ALERT_TARGETS, "alert_id", "$response.body#/data/0/id"),
    (("GET", "/v1/alerts", ("200",)), ALERT_TARGETS, "alert_id", "$response.body#/data/0/id"),
    (("POST", f"{RUN}/archive", ("200",)), PROJECT_TARGETS, "project", "$response.body#/project"),
    (("GET", "/v1/projects", ("200",)), PROJECT_TARGETS, "project", "$response.body#/data/0/name"),
    (("POST", f"{RUN}/stop", ("202",)), COMMAND_TARGETS, "command_id", "$response.body#/id"),
    (("POST", f"{RUN}/checkpoint", ("202",)), COMMAND_TARGETS, "command_id", "$response.body#/id"),
    (
        ("GET", f"{RUN}/commands", ("200",)),
        COMMAND_TARGETS,
        "command_id",
        "$response.body#/data/0/id",
    ),
    (("POST", f"{PROJECT}/policies", ("201",)), POLICY_TARGETS, "policy_id", "$response.body#/id"),
    (
        ("GET", f"{PROJECT}/policies", ("200",)),
        POLICY_TARGETS,
        "policy_id",
        "$response.body#/data/0/id",
    ),
    (("POST", "/v1/webhooks", ("201",)), HOOK_TARGETS, "hook_id", "$response.body#/id"),
    (("GET", "/v1/webhooks", ("200",)), HOOK_TARGETS, "hook_id", "$response.body#/data/0/id"),
    (
        ("POST", "/v1/tokens", ("201",)),
        (("DELETE", "/v1/tokens/{token_id}"),),
        "token_id",
        "$response.body#/id",
    ),
    (
        ("GET", "/v1/tokens", ("200",)),
        (("DELETE", "/v1/tokens/{token_id}"),),
        "token_id",
        "$response.body#/data/0/id",
    ),
]


def add_links(document: dict[str, Any], api_prefix: str) -> dict[str, Any]:
    """``document`` with LINKS in its answers' ``links``, named after the target operation."""
    paths = document.get("paths", {})

    def operation(method: str, path: str) -> dict[str, Any]:
        return paths[api_prefix + path][method.lower()]

    for (method, path, statuses), targets, parameter, value in LINKS:
        source = operation(method, path)
        for target_method, target_path in targets:
            target_id = operation(target_method, target_path)["operationId"]
            link = {"operationId": target_id, "parameters": {parameter: value}}
            for status in statuses:
                links = source["responses"][status].setdefault("links", {})
                links[target_id] = link
    return document
