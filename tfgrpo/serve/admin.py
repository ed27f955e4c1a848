"""The admin routes of a deployment: its status, its decision log, and an operator's promote, rollback, pause
and resume, for admin keys only (`admin_keys`; without client keys nothing is trusted, so there are none).

    GET  /v1/admin/deployment            the deployment and the running test's bounds
    GET  /v1/admin/deployment/log        the decision log, oldest first (?limit=N, default 100)
    POST /v1/admin/deployment/ACTION     promote | rollback | pause | resume

Each change is the operations' (`operations.py`), logged as decided by "admin KEYHASH" (the key's hash,
shortened: never the key); the worker that made it serves it at once, the others within their poll.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from tfgrpo.serve import operations
from tfgrpo.serve.errors import RequestRejected
from tfgrpo.serve.live_deployment import LiveDeployment
from tfgrpo.serve.state import ServeState

PREFIX = "/v1/admin/deployment"
ACTIONS: dict[str, Callable[..., Any]] = {
    "promote": operations.promote_now,
    "rollback": operations.rollback_now,
    "pause": lambda deployment, by: operations.set_paused(deployment, True, by=by),
    "resume": lambda deployment, by: operations.set_paused(deployment, False, by=by),
}


def add_admin_routes(app: FastAPI, state: ServeState, record_key: str) -> None:
    """`record_key`: where the request's RequestRecord (with the client key's identity) sits in the scope."""
    config = state.config

    def admin(request: Request) -> tuple[LiveDeployment, str]:
        identity = request.scope[record_key].identity
        if state.client_keys is None or not state.client_keys.is_admin(identity):
            raise RequestRejected(
                403, "the admin routes take an admin key (admin_keys, with client_keys on)", "admin_only"
            )
        if state.deployment is None:
            raise RequestRejected(409, "this server runs no deployment (deployment.enabled is off)", "deployment_off")
        return state.deployment, f"admin {identity[:8]}"

    @app.get(PREFIX)
    async def deployment_status(request: Request) -> JSONResponse:
        live, _by = admin(request)
        bounds = (config.reward_min, config.reward_max)
        found = await asyncio.to_thread(
            operations.status, live.deployment, state.traces.engine, config.deployment, bounds
        )
        return JSONResponse(found)

    @app.get(PREFIX + "/log")
    async def deployment_log(request: Request, limit: int = 100) -> JSONResponse:
        live, _by = admin(request)
        entries = await asyncio.to_thread(live.deployment.decisions, limit=max(1, min(limit, 10_000)))
        return JSONResponse(entries)

    @app.post(PREFIX + "/{action}")
    async def deployment_change(request: Request, action: str) -> JSONResponse:
        live, by = admin(request)
        change = ACTIONS.get(action)
        if change is None:
            raise RequestRejected(
                404, f"{PREFIX}/{action[:40]}: the actions are {', '.join(ACTIONS)}", "unknown_route"
            )

        def run() -> dict[str, Any]:
            try:
                changed = change(live.deployment, by=by)
            except operations.DeploymentRefused as exc:
                raise RequestRejected(409, str(exc), "deployment_refused") from None
            live.refresh()  # this worker serves it now; the others at their next poll
            return {"revision": changed.revision, "champion": changed.champion, "challenger": changed.challenger}

        return JSONResponse(await asyncio.to_thread(run))
