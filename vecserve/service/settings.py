"""Settings of the HTTP service, from keyword arguments or ``VECSERVE_*`` variables.

Every field can be set in the environment with the ``VECSERVE_`` prefix (``max_words`` is
``VECSERVE_MAX_WORDS``); keyword arguments win over the environment. Nothing reads the
environment at import time: :func:`vecserve.api.create_app` builds a :class:`Settings`
when it is not given one, so tests pass their own.

>>> Settings(default_model="GOOGLE_W2V", max_words=500).max_words
500
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ..config import DEFAULT_MODEL_TTL, check_redis_url

__all__ = ["Settings"]


class Settings(BaseSettings):
    """Configuration of one API process (shared by every uvicorn worker via the env)."""

    model_config = SettingsConfigDict(env_prefix="VECSERVE_", extra="ignore", frozen=True)

    redis_url: str | None = Field(
        None, description="Redis/Valkey URL; unset = vecserve's embedded server."
    )
    data_dir: Path | None = Field(None, description="Data dir of the embedded server.")
    default_model: str | None = Field(
        None, description="Model used when a request has no `model=` parameter."
    )
    cache_dir: Path | None = Field(
        None, description="Where similarity indexes are cached as memory-mapped files."
    )
    preload: bool = Field(
        False, description="Build/open the default model's similarity index at start-up."
    )
    ann: bool = Field(False, description="Also build an approximate (IVF or HNSW) index per model.")
    ann_recall: float = Field(
        0.95,
        gt=0,
        le=1,
        description="recall@10 the approximate index is built to meet, measured on the "
        "model's own queries; where no setting meets it within the latency budget, "
        "approximate queries are answered exactly (and say so).",
    )
    vector_cache: int = Field(
        20_000,
        ge=0,
        description="Vectors per model kept in this process's memory (0 = off); kept "
        "correct by Redis client-side-caching invalidations.",
    )
    metrics_dir: Path | None = Field(
        None,
        description="Directory where each worker publishes its metrics so that /metrics "
        "answers for all workers (empty, one per run; `vecserve serve --workers N` makes one).",
    )
    max_words: int = Field(1000, ge=1, description="Most words in one request.")
    max_topn: int = Field(1000, ge=1, description="Largest `topn`.")
    max_batch: int = Field(256, ge=1, description="Most queries in one batch request.")
    coalesce: bool = Field(
        True,
        description="Answer most_similar requests that arrive while others are being "
        "answered together, in one batch (each caller its own answer).",
    )
    max_body_bytes: int = Field(1 << 20, ge=1024, description="Largest request body.")
    redis_timeout: float = Field(
        10.0, gt=0, description="Seconds one Redis command may take before it fails (503)."
    )
    retry_after: int = Field(5, ge=1, description="Seconds in Retry-After when Redis is down.")
    api_keys: SecretStr | None = Field(
        None,
        description="Comma-separated API keys; when any is set, every endpoint but /healthz, "
        "/readyz and the explorer page's files needs `Authorization: Bearer <key>`.",
    )
    api_keys_file: Path | None = Field(
        None,
        description="A file of API keys, one a line (# comments and blanks ignored); as with "
        "`api_keys`, every endpoint but /healthz, /readyz and the explorer page's files then "
        "needs `Authorization: Bearer <key>`.",
    )
    show_paths: bool = Field(
        False,
        description="Show the server's full paths in /models (a model's source file, its "
        "snapshot); default: their file names only, so a client learns nothing of the "
        "server's disk.",
    )
    metrics_keys: SecretStr | None = Field(
        None,
        description="Comma-separated keys that open /metrics and nothing else (a Prometheus "
        "scrape's bearer token); /metrics also takes the API keys. Set, /metrics needs a key.",
    )
    model_ttl: float = Field(
        DEFAULT_MODEL_TTL,
        ge=0,
        description="Seconds a model's registry entry answers metadata calls between checks "
        "(every read of rows checks it anyway); the same setting RedisKeyedVectors reads.",
    )

    @field_validator("redis_url")
    @classmethod
    def _usable_url(cls, url: str | None) -> str | None:
        """A URL redis-py can connect with (refused at start, not on the first request)."""
        return url and check_redis_url(url, "redis_url")
