"""``vecserve load``: a vector file (or a static model's directory) into Redis, then,
with --ann, its search readied as the service's preload does."""

from __future__ import annotations

import time

import click

from ..clierrors import friendly_errors
from ..clioptions import redis_url_option
from ..codec import CODECS
from ..readers.formats import FORMATS as READER_FORMATS
from .root import cli

__all__ = ["FORMATS", "load"]

# `open_vectors`' format names, from the readers' table (a light module: fast start-up)
FORMATS = ["auto", *READER_FORMATS]


@cli.command()
@click.argument("file", type=click.Path(allow_dash=True, path_type=str))  # or a static model dir
@click.option("--key", "-k", "name", required=True, help="Model name: keys are NAME:token.")
@click.option(
    "--format",
    "format",
    type=click.Choice(FORMATS),
    default="auto",
    show_default=True,
    help="The file's format; auto: sniffed from its name and first bytes.",
)
@click.option(
    "--codec",
    type=click.Choice(list(CODECS)),
    default="f32",
    show_default=True,
    help="f32 exact; f16 2x smaller; i8 4x smaller.",
)
@click.option(
    "--limit", type=click.IntRange(min=1), default=None, help="Load only the first N vectors."
)
@click.option(
    "--unicode-errors",
    type=click.Choice(["strict", "ignore", "replace"]),
    default="strict",
    show_default=True,
    help="What to do with token bytes that are not valid UTF-8 (as gensim).",
)
@click.option("--encoding", default="utf-8", show_default=True, help="Token encoding.")
@click.option("--resume", is_flag=True, help="Continue an interrupted load of this model.")
@click.option("--restart", is_flag=True, help="Drop an interrupted load of it and start again.")
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=None,
    help="Vectors per pipelined write (default: ~2 MB worth).",
)
@click.option(
    "--progress/--no-progress", default=None, help="Progress bar (default: on a terminal)."
)
@click.option(
    "--retries",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="When Redis goes away mid-load (a failover, a restart), resume this many times, "
    "after 2, 4, 8... seconds.",
)
@click.option(
    "--allow-eviction",
    is_flag=True,
    help="Load even into a server whose maxmemory-policy is allkeys-* (it may evict parts "
    "of the model later: lookups then raise ModelDamaged); refused otherwise.",
)
@click.option(
    "--ann",
    is_flag=True,
    help="Then build the similarity snapshot and the approximate index (IVF or HNSW) into the "
    "cache dir ($VECSERVE_CACHE_DIR), so `vecserve serve --ann` only maps them.",
)
@click.option(
    "--ann-recall",
    type=click.FloatRange(0, 1, min_open=True),
    default=0.95,
    show_default=True,
    metavar="R",
    help="With --ann: the recall@10 the approximate index is built to meet (serve with "
    "the same --ann-recall to use it).",
)
@redis_url_option
@friendly_errors
def load(file, resume, restart, retries, ann, ann_recall, redis_url, **options):
    """Load a vector FILE into Redis as model --key.

    Streams word2vec .bin/.txt (also .gz/.bz2), GloVe, fastText .vec, native fastText
    .bin (with its n-gram buckets: unknown words then get vectors) and gensim
    KeyedVectors files in constant memory. The model becomes visible only when every
    vector is in (every row is checked present before the commit); re-loading an
    existing model replaces it atomically. Where the server shows its memory (INFO), a
    model that cannot fit is refused before anything is written. FILE `-` reads standard
    input (plain, gzip or bz2; text or word2vec binary), which cannot be resumed.

    \b
    Example:
        vecserve load GoogleNews-vectors-negative300.bin.gz --key GOOGLE_W2V
        vecserve load glove.840B.300d.txt --key GLOVE --codec f16
        vecserve load cc.en.300.bin --key FT --codec f16
        vecserve load GoogleNews-vectors-negative300.bin --key GOOGLE_W2V --ann
        curl -sL https://example.org/vectors.vec.gz | vecserve load - --key FT_EN
    """
    from ..loader import load_file

    if ann:
        try:
            import usearch.index  # noqa: F401
        except ImportError as exc:
            raise click.ClickException(
                f"--ann needs the api extra: pip install 'vecserve[api]' ({exc})"
            ) from exc

    if resume and restart:
        raise click.UsageError("--resume and --restart exclude each other")
    if ann:  # where the index goes must be usable before the load, not after it
        from .. import config

        config.make_dir(config.cache_dir(), "cache dir", "$VECSERVE_CACHE_DIR")
    started = time.monotonic()
    # the other options are load_file's keyword arguments, named alike; it retries
    info = load_file(
        file, redis_url=redis_url, resume=resume, restart=restart, retries=retries, **options
    )
    took = time.monotonic() - started
    began = f" ({info.load_seconds:.1f}s since the load began)" if resume else ""
    click.echo(
        f"{info.name}: {info.count:,} vectors x {info.dim} ({info.codec}, {info.source_format}) "
        f"committed as generation {info.generation} in {took:.1f}s{began}"
        + (f"; {info.duplicates} duplicate tokens skipped" if info.duplicates else "")
    )
    if ann:
        _build_ann(info, redis_url, ann_recall)


def _build_ann(info, redis_url, recall: float) -> None:
    """Snapshot the committed generation and ready its search as the service's preload does
    (:func:`vecserve.search.ann.build_model`), then say how it went."""
    from ..connect import open_store
    from ..search.ann import AnnParams, build_model

    start = time.perf_counter()
    with open_store(redis_url) as store:
        built = build_model(store, info, params=AnnParams(recall=recall))
    took = f"{time.perf_counter() - start:.1f}s"
    ann = built.index
    if not ann.usable:
        click.echo(
            f"{info.name}: approximate index of generation {info.generation} built in {took}, "
            f"but approximate queries will be answered exactly: {ann.fallback_reason} "
            f"({built.path})"
        )
        return
    target = ann.meta.target
    setting = ", ".join(f"{k} {v}" for k, v in target.setting.items()) if target else ""
    low, high = ann.meta.recall_interval or (None, None)
    interval = f" (95% CI {low:.3f}-{high:.3f})" if low is not None else ""
    click.echo(
        f"{info.name}: approximate index of generation {info.generation} ready in {took}, "
        f"recall@10 {ann.recall_at_10:.3f}{interval}"
        + (f" at {setting}, target {target.recall}" if setting else "")
        + f" ({built.path})"
    )
