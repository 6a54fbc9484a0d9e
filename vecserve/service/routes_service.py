"""The service's own routes: ``/models``, ``/models/{name}`` (registry metadata, index and
ANN status), ``/healthz``, ``/readyz``, ``/metrics`` (Prometheus text format).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import PurePath
from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import PlainTextResponse, Response

from ..errors import ModelNotFound
from .deps import ContextDep, SettingsDep, resolve_model_name
from .params import ERRORS
from .responses import error_response, json_response
from .schemas import MODEL_PATH, ErrorBody
from .settings import Settings

__all__ = ["router"]

router = APIRouter()


@router.get("/models")
def list_models(ctx: ContextDep):
    """Every committed model's metadata."""
    models = ctx.stores.get().list_models()
    return json_response({"models": [_model_dict(m, ctx.settings) for m in models]})


@router.get("/models/{name}", responses=ERRORS)
def get_model(
    ctx: ContextDep,
    name: Annotated[str, Path(description="Model name.", json_schema_extra=MODEL_PATH)],
):
    """A model's metadata (dim, codec, count, generation, source) and index status."""
    resolve_model_name(name, ctx.settings)
    info = ctx.model(name, fresh=True)
    out = _model_dict(info, ctx.settings)
    out["index"] = ctx.search.index_status(info)
    if out["index"].get("path"):
        out["index"]["path"] = _shown_path(out["index"]["path"], ctx.settings)
    out["ann"] = ctx.search.ann_status(info)
    out["vector_cache"] = ctx.vector_cache_stats().get(info.name)
    return json_response(out)


@router.get("/healthz")
async def healthz():
    """The process is up (no dependency is checked)."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"model": ErrorBody}})
def readyz(ctx: ContextDep, settings: SettingsDep):
    """Ready: the store answers and the default model (if configured) is loaded."""
    ctx.stores.get().ping()
    out = {"status": "ready", "default_model": settings.default_model}
    if settings.default_model:
        try:
            info = ctx.model(settings.default_model)
        except ModelNotFound:
            return error_response(
                503,
                "NotReady",
                f"default model {settings.default_model!r} is not loaded",
                headers={"Retry-After": str(settings.retry_after)},
            )
        out["generation"] = info.generation
        if settings.preload and not ctx.search.preloaded(info):
            return error_response(
                503,
                "NotReady",
                f"similarity index of {info.name!r} is being built",
                headers={"Retry-After": str(settings.retry_after)},
            )
    return out


@router.get("/metrics", response_class=PlainTextResponse)
def prometheus(ctx: ContextDep):
    """Request counts and latencies per endpoint, cache hits, index build times (all
    workers' when the service runs several)."""
    return Response(ctx.metrics.render(), media_type="text/plain; version=0.0.4")


def _model_dict(info, settings: Settings) -> dict:
    data = asdict(info)
    data.pop("prefix", None)
    data.pop("buckets", None)
    if data.get("source"):
        data["source"] = _shown_path(data["source"], settings)
    return data


def _shown_path(path: str, settings: Settings) -> str:
    """``path`` as /models shows it: its last part (``GoogleNews.bin``), the full server
    path only with ``settings.show_paths``.

    >>> _shown_path("/srv/models/GoogleNews.bin", Settings())
    'GoogleNews.bin'
    >>> _shown_path("/srv/models/GoogleNews.bin", Settings(show_paths=True))
    '/srv/models/GoogleNews.bin'
    """
    if settings.show_paths:
        return path
    return PurePath(path).name or path
