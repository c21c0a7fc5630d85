"""The MCP server: eight tools over the REST API, one definition for stdio and HTTP.

Tool names are stable (prompts and docs name them). Each answer is compact JSON
(``answers.compact``); each refusal of the service is a tool error with its fix.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations
from pydantic import Field

from rlguard_backend import __version__
from rlguard_backend.mcp import health, incident, reads
from rlguard_backend.mcp.answers import compact
from rlguard_backend.mcp.rest import Service
from rlguard_backend.schemas.wire import RunStatus

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
# Clients ask before calling a destructive tool: a stop ends the training run.
COMMAND = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
)
INSTRUCTIONS = (
    "rlguard watches RL fine-tuning runs of language models. Start with list_runs "
    "(health=critical finds runs in trouble), then run_health for one run, incident for one "
    "alert. Numbers are rounded to 4 significant digits; long lists and texts say what was cut."
)

RunId = Annotated[str, Field(description="the run's id, as list_runs shows it")]
AlertId = Annotated[int, Field(ge=1, description="the alert's id, as run_health shows it")]
Step = Annotated[int | None, Field(ge=0, description="a training step")]
Reason = Annotated[str | None, Field(max_length=500, description="why, shown to the team")]


def build_server(service: Service) -> MCPServer:
    """The rlguard MCP server whose tools call ``service``'s REST API."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    server = MCPServer("rlguard", version=__version__, instructions=INSTRUCTIONS)
    # MCPServer calls logging.basicConfig; the service and the command set up their own logging.
    root.handlers[:], root.level = handlers, level

    @server.tool(annotations=READ_ONLY)
    async def list_runs(
        ctx: Context,
        project: str | None = None,
        status: RunStatus | None = None,
        health: Literal["ok", "warn", "critical"] | None = None,
        tag: str | None = None,
        config: Annotated[
            dict[str, str | float | bool] | None,
            Field(description='config keys and the values to match, e.g. {"lr": 0.001}'),
        ] = None,
        limit: Annotated[int, Field(ge=1, le=100)] = 20,
    ) -> str:
        """Runs, newest first, by project, status, health (worst open alert), tag or config."""
        rest = service.client(ctx.headers)
        return compact(await reads.list_runs(rest, project, status, health, tag, config, limit))

    @server.tool(annotations=READ_ONLY)
    async def run_health(ctx: Context, run_id: RunId) -> str:
        """A run's status and last step, its open alerts with evidence and advice, and the last
        values of its stability signals against their alert thresholds."""
        return compact(await health.run_health(service.client(ctx.headers), run_id))

    @server.tool(annotations=READ_ONLY)
    async def get_series(
        ctx: Context,
        run_id: RunId,
        keys: Annotated[
            list[str],
            Field(description="metric keys or canonical signals: entropy, ppo_kl, clipfrac…"),
        ],
        from_step: Step = None,
        to_step: Step = None,
        max_points: Annotated[int, Field(ge=8, le=reads.MAX_SERIES_POINTS)] = 100,
    ) -> str:
        """Several series of a run over a step range; downsampled as per-bucket min and max, so
        spikes stay visible."""
        rest = service.client(ctx.headers)
        answer = await reads.get_series(rest, run_id, keys, from_step, to_step, max_points)
        return compact(answer)

    @server.tool(annotations=READ_ONLY)
    async def compare_runs(
        ctx: Context,
        run_id: RunId,
        baseline_run_id: Annotated[
            str | None, Field(description="none: compare with the run's seed group's band")
        ] = None,
        signals: Annotated[
            list[str] | None, Field(description="canonical signals; default the main six")
        ] = None,
        bins: Annotated[int, Field(ge=2, le=100)] = 20,
    ) -> str:
        """A run against a baseline run, or against the band (mean, min, max) of its seed
        siblings: runs of its project whose config differs only in seed keys."""
        rest = service.client(ctx.headers)
        return compact(await incident.compare_runs(rest, run_id, baseline_run_id, signals, bins))

    @server.tool(annotations=READ_ONLY)
    async def get_samples(
        ctx: Context,
        run_id: RunId | None = None,
        step: Step = None,
        alert_id: AlertId | None = None,
        window: Annotated[int, Field(ge=0, le=1000, description="steps each side")] = 0,
        sort: Literal["step", "reward", "advantage", "length"] = "reward",
        order: Literal["asc", "desc"] = "asc",
        limit: Annotated[int, Field(ge=1, le=50)] = 8,
    ) -> str:
        """Rollout samples around a step of a run, or of an alert's steps (worst reward first)."""
        rest = service.client(ctx.headers)
        answer = await reads.get_samples(rest, run_id, step, alert_id, window, sort, order, limit)
        return compact(answer)

    @server.tool(name="incident", annotations=READ_ONLY)
    async def incident_tool(ctx: Context, alert_id: AlertId) -> str:
        """One alert as an incident: its onset step, the signals that moved with it ranked by
        how much, samples before and after, the config difference to the healthiest sibling
        run, and the steps since the onset."""
        return compact(await incident.incident(service.client(ctx.headers), alert_id))

    _add_commands(server, service)
    return server


# tool name -> (the REST command, its description)
COMMANDS = {
    "stop_run": ("stop", "Ask a running training run to stop (needs a write-scope token)."),
    "checkpoint_run": (
        "checkpoint",
        "Ask a running training run to save a checkpoint now (needs a write-scope token).",
    ),
}


def _add_commands(server: MCPServer, service: Service) -> None:
    for name, (kind, description) in COMMANDS.items():
        server.add_tool(
            _command(service, kind), name=name, description=description, annotations=COMMAND
        )


def _command(service: Service, kind: str) -> Callable[..., Awaitable[str]]:
    async def ask_trainer(
        ctx: Context, run_id: RunId, reason: Reason = None, alert_id: AlertId | None = None
    ) -> str:
        rest = service.client(ctx.headers)
        return compact(await reads.ask_trainer(rest, run_id, kind, reason, alert_id))

    return ask_trainer
