"""The plain read tools and the two commands: runs, series, samples, stop and checkpoint."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver.exceptions import ToolError

from rlguard_backend.mcp.rest import Rest, quote

RUN_FIELDS = ("id", "project", "name", "status", "last_step", "tags")
SAMPLE_FIELDS = ("step", "index", "reward", "advantage", "length", "truncated", "group")
SAMPLE_TEXT_CHARS = 300
MAX_SERIES_POINTS = 400


async def list_runs(
    rest: Rest,
    project: str | None,
    status: str | None,
    health: str | None,
    tag: str | None,
    config: dict[str, Any] | None,
    limit: int,
) -> dict[str, Any]:
    """Runs newest first, narrowed by the filters; each with its health and open alerts."""
    filters = [f"health:eq:{health}"] if health else []
    filters += [f"config.{key}:eq:{_text(value)}" for key, value in (config or {}).items()]
    page = await rest.get(
        "/runs",
        project=project,
        status=status,
        tag=tag,
        filter=filters,
        fields="health,alerts.open",
        limit=limit,
    )
    runs = [
        {
            **{name: row[name] for name in RUN_FIELDS},
            "health": row["values"].get("health"),
            "open_alerts": row["values"].get("alerts.open"),
            "url": rest.link(row["id"]),
        }
        for row in page["data"]
    ]
    return {"count": page["count"], "shown": len(runs), "runs": runs}


async def signal_keys(rest: Rest, run_id: str) -> dict[str, str]:
    """The run's metric keys by canonical signal (the first key by name of each)."""
    keys = await rest.get(f"/runs/{quote(run_id)}/keys")
    by_signal: dict[str, str] = {}
    for key in sorted(keys["data"], key=lambda k: k["name"]):
        if key["signal"]:
            by_signal.setdefault(key["signal"], key["name"])
    return by_signal


async def get_series(
    rest: Rest,
    run_id: str,
    keys: list[str],
    from_step: int | None,
    to_step: int | None,
    max_points: int,
) -> dict[str, Any]:
    """Several keys (or canonical signals) over a step range, min/max-bucketed: spikes kept."""
    if not keys:
        raise ToolError("keys: name at least one metric key or canonical signal (e.g. entropy)")
    by_signal = await signal_keys(rest, run_id)
    stored = [by_signal.get(key, key) for key in keys]
    answer = await rest.get(
        f"/runs/{quote(run_id)}/series",
        keys=",".join(stored),
        from_step=from_step,
        to_step=to_step,
        max_points=max(8, min(max_points, MAX_SERIES_POINTS)),
    )
    series = {
        asked: _series(answer["series"][key])
        for asked, key in zip(keys, stored, strict=True)
        if key in answer["series"]
    }
    return {
        "run_id": run_id,
        "url": rest.link(run_id, from_step, to_step),
        "series": series,
        "missing": answer["missing"],
    }


def _series(data: dict[str, Any]) -> dict[str, Any]:
    shown = {"steps": data["steps"], "values": data["values"], "points": data["total_points"]}
    if data["downsampled"]:
        shown |= {"bucket_size": data["bucket_size"], "min": data["min"], "max": data["max"]}
    return shown


async def get_samples(
    rest: Rest,
    run_id: str | None,
    step: int | None,
    alert_id: int | None,
    window: int,
    sort: str,
    order: str,
    limit: int,
) -> dict[str, Any]:
    """Samples around a step (``window`` steps each side) or of an alert's steps, sorted."""
    if alert_id is not None:
        found = await rest.get(f"/alerts/{alert_id}/samples", before=window, limit=limit)
        steps = [s["step"] for s in found["data"]]
        run_id = found["data"][0]["run_id"] if steps else None
        url = rest.link(run_id, min(steps), max(steps)) if run_id is not None else None
    elif run_id is not None and step is not None:
        url = rest.link(run_id, max(step - window, 0), step + window)
        found = await rest.get(
            f"/runs/{quote(run_id)}/samples",
            from_step=max(step - window, 0),
            to_step=step + window,
            sort=sort,
            order=order,
            limit=limit,
        )
    else:
        raise ToolError("give alert_id, or run_id with step (samples around that step)")
    return {"count": found["count"], "url": url, "samples": [sample(s) for s in found["data"]]}


def sample(row: dict[str, Any]) -> dict[str, Any]:
    """A sample as a tool shows it: its numbers, and its prompt and response cut short."""
    shown = {name: row[name] for name in SAMPLE_FIELDS if row.get(name) is not None}
    for name in ("prompt", "response"):
        text = row.get(name)
        if text is not None:
            shown[name] = text if len(text) <= SAMPLE_TEXT_CHARS else text[:SAMPLE_TEXT_CHARS] + "…"
    return shown


async def ask_trainer(
    rest: Rest, run_id: str, kind: str, reason: str | None, alert_id: int | None
) -> dict[str, Any]:
    """Ask the run's trainer to stop or checkpoint: the command as the service queued it."""
    body = {name: v for name, v in (("reason", reason), ("alert_id", alert_id)) if v is not None}
    command = await rest.post(f"/runs/{quote(run_id)}/{kind}", body or None)
    return {
        "run_id": run_id,
        "url": rest.link(run_id),
        "command": command,
        "note": "the trainer's hook receives it with its next batch and acts at its next step",
    }


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
