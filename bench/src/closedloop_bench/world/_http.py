"""Plumbing shared by the route modules: the world and the request context as dependencies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from ._world import Failure, World

__all__ = ["REQUEST_ID", "Ctx", "CtxDep", "WorldDep", "answer", "problem_response"]

# The ASGI scope key under which the request-id middleware leaves each request's id.
REQUEST_ID = "closedloop.request_id"


def _world(request: Request) -> World:
    world: World = request.app.state.world
    return world


@dataclass(frozen=True, slots=True)
class Ctx:
    """Who is asking: the request's id and its ``Idempotency-Key`` header, if any."""

    request_id: str
    idempotency_key: str | None


def _ctx(request: Request) -> Ctx:
    return Ctx(
        request_id=str(request.scope.get(REQUEST_ID, "req-unknown")),
        idempotency_key=request.headers.get("idempotency-key"),
    )


WorldDep = Annotated[World, Depends(_world)]
CtxDep = Annotated[Ctx, Depends(_ctx)]


def problem_response(failure: Failure, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(
        failure.problem.model_dump(mode="json"), status_code=failure.status, headers=headers
    )


def answer(result: BaseModel | Failure) -> BaseModel | JSONResponse:
    """A model as the route's normal answer, a ``Failure`` as its error response."""
    return problem_response(result) if isinstance(result, Failure) else result
