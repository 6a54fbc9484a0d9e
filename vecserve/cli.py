"""The ``vecserve`` command line: thin over the library.

Each command parses its flags, calls one library function and turns the library's root
exception (:class:`~vecserve.errors.VecserveError`) into a one-line message and a
non-zero exit; a traceback means a bug.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import json
import logging
import sys
import time

import click
import numpy as np

from .clioptions import (
    QUIET_HELP,
    VERBOSE_HELP,
    add_global_options,
    alias_option,
    json_option,
    model_option,
    redis_url_option,
)
from .codec import CODECS
from .errors import (
    LoadInterrupted,
    ModelNotFound,
    PermissionDenied,
    VecserveError,
)
from .readers.formats import FORMATS as READER_FORMATS

log = logging.getLogger("vecserve")

# `open_vectors`' format names, from the readers' table (a light module: fast start-up)
FORMATS = ["auto", *READER_FORMATS]


def friendly_errors(f):
    """Turn vecserve's errors into one line on stderr and exit status 1 (130 on Ctrl-C)."""

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        try:
            return f(*args, **kwargs)
        except ModelNotFound as exc:
            raise click.ClickException(f"{exc}{_models_hint(exc.name)}") from exc
        except LoadInterrupted as exc:
            raise click.ClickException(f"{exc}{_load_hint(exc)}") from exc
        except VecserveError as exc:
            raise click.ClickException(str(exc)) from exc
        except KeyboardInterrupt:
            click.echo("vecserve: interrupted", err=True)
            sys.exit(130)

    return wrapper


def _load_hint(exc: LoadInterrupted) -> str:
    """What to do after a load stopped: continue it, or (a stream) run it again."""
    if exc.resumable:
        return f" Continue with `{exc.resume_command}` or drop it with `vecserve models cleanup`."
    return " Run the command again (with --restart if `vecserve models` still lists the load)."


def _models_hint(name: str) -> str:
    """What to say after "model 'X' not found": the near match and the models there are
    (asked of the same server the command used; nothing when it cannot be asked)."""
    ctx = click.get_current_context(silent=True)
    url = None
    while ctx is not None and url is None:
        url = ctx.params.get("redis_url")
        ctx = ctx.parent
    try:
        from .connect import open_store

        with open_store(url) as store:
            names = sorted(m.name for m in store.list_models())
    except VecserveError:
        return ""
    if not names:
        return "; there are no models yet (vecserve load FILE --key NAME)"
    exc_name = str(name)
    if exc_name in names:
        return ""
    near = {n.lower(): n for n in names}
    match = near.get(exc_name.lower()) or next(
        iter(difflib.get_close_matches(exc_name, names, n=1, cutoff=0.6)), None
    )
    if match is None:
        low = difflib.get_close_matches(exc_name.lower(), list(near), n=1, cutoff=0.6)
        match = near[low[0]] if low else None
    shown = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
    guess = f"; did you mean {match}?" if match else ""
    return f"{guess} (models: {shown})"


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"vecserve: {record.getMessage()}"


class LazyGroup(click.Group):
    """A group whose heavier commands are imported only when used (fast start-up)."""

    lazy = {  # noqa: RUF012
        "serve": "vecserve.service.serve:serve",
        "train": "vecserve.train.cli:train",
        "embed": "vecserve.text.cli:embed",
    }

    def list_commands(self, ctx):
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx, name):
        if name in self.lazy and name not in self.commands:
            module, attr = self.lazy[name].split(":")
            try:
                mod = importlib.import_module(module)
            except ModuleNotFoundError as exc:
                if exc.name != module:
                    raise
                return None  # that part of vecserve is not installed/built here
            self.add_command(getattr(mod, attr), name)
        command = super().get_command(ctx, name)
        # -q and -v after the subcommand too, on every command, lazy ones included
        return None if command is None else add_global_options(command)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="vecserve")
@click.option("-q", "--quiet", is_flag=True, help=QUIET_HELP)
@click.option("-v", "--verbose", is_flag=True, help=VERBOSE_HELP)
@redis_url_option
def cli(quiet: bool, verbose: bool, redis_url: str | None) -> None:
    """Serve word vectors out of Redis, embed text with them, train word2vec or fastText into it.

    -q, -v and --redis-url may come before or after the command.

    \b
    Example:
        vecserve load GoogleNews-vectors-negative300.bin --key GOOGLE_W2V
        vecserve similar king queen --key GOOGLE_W2V
        vecserve models
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter())
    root = logging.getLogger("vecserve")
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO)
    root.propagate = False


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
    from .loader import load_file

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
        from . import config

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
    from .connect import open_store
    from .search.ann import AnnParams, build_model

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


@cli.group(invoke_without_command=True)
@redis_url_option
@json_option('Print JSON: {"models": [...], "loads": [...]}.')
@click.pass_context
@friendly_errors
def models(ctx, redis_url, as_json):
    """List models and unfinished loads (subcommands: info, check, delete, cleanup,
    history, rollback).

    \b
    Example:
        vecserve models
        vecserve models info --key GOOGLE_W2V
        vecserve models check --key GOOGLE_W2V
        vecserve models delete --key OLD_MODEL
        vecserve models cleanup
        vecserve models history --key GOOGLE_W2V
    """
    ctx.ensure_object(dict)
    ctx.obj["redis_url"] = redis_url
    if ctx.invoked_subcommand is not None:
        return
    from .connect import open_store
    from .store.lease import holder_is_dead

    with open_store(redis_url) as store:
        rows = store.list_models()
        loads = [(s, store.lock_holder(s.name)) for s in store.list_loads()]
        try:  # models whose registry entry is gone, keys of them remaining
            orphans = store.orphans()
        except PermissionDenied:  # a user limited to some models: it lists what it may read
            orphans = {}
    # a loader that is a dead process of this host no longer loads, lease or not
    loads = [(s, None if h is None or holder_is_dead(h) else h) for s, h in loads]
    if as_json:
        click.echo(
            json.dumps(
                {
                    "models": [_model_json(m) for m in rows],
                    "loads": [_load_json(s, holder) for s, holder in loads],
                    "damaged": sorted(orphans),
                },
                sort_keys=True,
            )
        )
        return
    if not rows and not loads and not orphans:
        click.echo("no models")
        return
    if rows:
        click.echo(f"{'MODEL':<24} {'VECTORS':>12} {'DIM':>5} {'CODEC':<5} {'GEN':>4}  SOURCE")
    for m in rows:
        click.echo(
            f"{m.name:<24} {m.count:>12,} {m.dim:>5} {m.codec:<5} {m.generation:>4}  {m.source}"
        )
    for s, holder in loads:
        status = f"loading now ({holder})" if holder else "INCOMPLETE (interrupted)"
        total = f"/{s.declared_count:,}" if s.declared_count else ""
        click.echo(
            f"{s.name:<24} {s.written:>12,}{total} vectors written, {status}; source {s.source}"
        )
    for name in orphans:
        click.echo(
            f"{name:<24} DAMAGED: its registry entry is gone, keys of it remain "
            f"(vecserve models check --key {name})"
        )
    if any(holder is None for _, holder in loads):
        click.echo(
            "resume with `vecserve load FILE --key NAME --resume`, "
            "or drop with `vecserve models cleanup`"
        )


def _model_json(m) -> dict:
    return {
        "name": m.name,
        "count": m.count,
        "dim": m.dim,
        "codec": m.codec,
        "generation": m.generation,
        "source": m.source,
        "source_format": m.source_format,
    }


def _load_json(s, holder: str | None) -> dict:
    return {
        "name": s.name,
        "written": s.written,
        "declared_count": s.declared_count,
        "state": "loading" if holder else "incomplete",
        "loader": holder,
        "source": s.source,
    }


def model_name(command):
    """The model a ``models`` subcommand works on: ``--key NAME`` (as everywhere), or the
    positional NAME its first version took (still accepted, for scripts)."""

    @functools.wraps(command)
    def wrapper(*args, name=None, name_arg=None, **kwargs):
        if name is not None and name_arg is not None and name_arg != name:
            if "generation" in kwargs and kwargs["generation"] is None and name_arg.isdigit():
                kwargs["generation"] = int(name_arg)  # `rollback --key M 7`
            else:
                raise click.UsageError(f"two models given: --key {name} and {name_arg}")
        name = name or name_arg
        if name is None:
            raise click.UsageError("which model? give --key NAME")
        return command(*args, name=name, **kwargs)

    wrapper = click.argument("name_arg", metavar="[NAME]", required=False)(wrapper)
    return model_option(required=False, help="The model (or give it as NAME).")(wrapper)


def _store_url(ctx, redis_url):
    return redis_url or (ctx.obj or {}).get("redis_url")


@models.command("info")
@model_name
@redis_url_option
@json_option("Print JSON (the default: this listing is JSON either way).")
@click.pass_context
@friendly_errors
def models_info(ctx, name, redis_url, as_json):
    """Show a model's metadata as JSON.

    \b
    Example:
        vecserve models info --key GOOGLE_W2V
    """
    from dataclasses import asdict

    from .connect import open_store

    with open_store(_store_url(ctx, redis_url)) as store:
        info = store.get_model(name)
        data = asdict(info)
        data["created_iso"] = _iso(info.created)
        data["ann"] = _ann_on_disk(info)
        check = store.last_check(name)
        if check is not None:
            check["checked_at_iso"] = _iso(check["checked_at"])
            check["current"] = check["generation"] == info.generation
        data["last_check"] = check
        click.echo(json.dumps(data, indent=2, sort_keys=True))


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


@models.command("check")
@model_name
@redis_url_option
@click.pass_context
@friendly_errors
def models_check(ctx, name, redis_url):
    """Verify that every row of a model's live generation is in Redis.

    Asks the server whether each key exists (pipelined multi-key EXISTS, no vectors
    travel), with progress on stderr; prints what is missing and exits 1 when the model
    is damaged (evicted keys, keys deleted by hand). The result is kept: `vecserve
    models info` shows the last check.

    \b
    Example:
        vecserve models check --key GOOGLE_W2V
    """
    from dataclasses import replace

    from .connect import open_store
    from .errors import ModelNotFound, PermissionDenied

    start = time.monotonic()
    last = [start]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 2 or done == total:
            last[0] = now
            share = 100 * done / max(total, 1)
            click.echo(f"checking {name}: {done:,}/{total:,} rows ({share:.0f}%)", err=True)

    again = f"load it again (vecserve load FILE --key {name})"
    with open_store(_store_url(ctx, redis_url)) as store:
        try:
            info = store.get_model(name)
        except ModelNotFound:
            remains = store.remains(name)  # keys no registry entry accounts for
            if not remains:
                raise
            found = "; ".join(f"{p}: {', '.join(what)}" for p, what in remains.items())
            raise click.ClickException(
                f"{name} is damaged: its registry entry is gone from Redis (evicted, lost "
                f"in a failover, or deleted by hand) but keys of it remain ({found}); {again}"
            ) from None
        check = store.check_rows(info, progress=progress)
        check = replace(check, lost=(*check.lost, *store.lost_metadata(info)))
        try:
            store.record_check(info, check)
        except PermissionDenied as exc:
            click.echo(f"vecserve: the result was not recorded: {exc}", err=True)
    took = time.monotonic() - start
    head = f"{name} (generation {info.generation})"
    if not check.damaged:
        click.echo(f"{head}: all {check.checked:,} rows present ({took:.1f}s)")
        return
    damage = []
    if check.lost:
        damage.append(
            f"gone from Redis (evicted, lost in a failover, or deleted by hand): "
            f"{', '.join(check.lost)}"
        )
    if check.unlisted:
        damage.append(f"{check.unlisted:,} of its {info.count:,} rows cannot be checked without it")
    if check.missing:
        words = ", ".join(repr(w) for w in check.words)
        damage.append(
            f"{check.missing:,} of its {check.checked:,} rows are missing"
            + (f" (e.g. {words})" if words else "")
        )
    raise click.ClickException(f"{head} is damaged: {'; '.join(damage)}; {again}")


def _ann_on_disk(info) -> dict:
    """The approximate index of this generation in the local cache dir, as the service
    sees it: ready (recall), building (share, vectors/s, ETA) or absent."""
    try:
        from .search.ann import disk_status
        from .search.snapshot import snapshot_dir
    except ImportError:  # the api extra is not installed
        return {"state": "absent"}
    return disk_status(snapshot_dir(info))


@models.command("delete")
@model_name
@click.option("--yes", "-y", is_flag=True, help="Delete without asking.")
@redis_url_option
@click.pass_context
@friendly_errors
def models_delete(ctx, name, yes, redis_url):
    """Delete a model: it disappears for readers at once, then its keys are removed.

    Asks first on a terminal; elsewhere (a script) it deletes only with --yes.

    \b
    Example:
        vecserve models delete --key OLD_MODEL
        vecserve models delete --key OLD_MODEL --yes
    """
    from .connect import open_store
    from .store.pins import drop_history

    with open_store(_store_url(ctx, redis_url)) as store:
        if not yes:
            info = store.get_model(name)  # an unknown model is said before any question
            if not sys.stdin.isatty():
                raise click.ClickException(
                    f"not deleting {name} without a terminal to ask on: pass --yes"
                )
            click.confirm(
                f"delete model {name} ({info.count:,} vectors x {info.dim}) and its "
                "retired generations?",
                abort=True,
                err=True,
            )
        retired = drop_history(store, name)  # its pins end first: pinned views stop reading
        info = store.delete_model(name)
    more = f" and {len(retired)} retired generations" if retired else ""
    click.echo(f"deleted {info.name} ({info.count:,} vectors){more}")


@models.command("cleanup")
@redis_url_option
@click.pass_context
@friendly_errors
def models_cleanup(ctx, redis_url):
    """Drop interrupted loads, finish deleting replaced generations, and delete retired
    generations that no pin holds any more (a crashed worker's, once its lease expired).

    \b
    Example:
        vecserve models cleanup
    """
    from .connect import open_store
    from .store import cleanup_loads
    from .store.pins import collect_all

    with open_store(_store_url(ctx, redis_url)) as store:
        done = cleanup_loads(store) + collect_all(store)
    click.echo("\n".join(done) if done else "nothing to clean up")


# -- retired generations: history and rollback (vecserve/store/pins.py) -------------------


@models.command("history")
@model_name
@click.option("--json", "as_json", is_flag=True, help="Print JSON, one object per generation.")
@redis_url_option
@click.pass_context
@friendly_errors
def models_history(ctx, name, as_json, redis_url):
    """List the generations of model NAME that still have their keys: the live one and
    the retired ones, pinned (by `kv.pin()`) or kept for rollback
    ($VECSERVE_KEEP_GENERATIONS when it was loaded), with their pins.

    Retired generations that nothing holds any more (their pins expired) are deleted
    first, where the Redis user may (a read-only user only lists).

    \b
    Example:
        vecserve models history --key GOOGLE_W2V
        vecserve models rollback --key GOOGLE_W2V
    """
    from .connect import open_store
    from .errors import LoadInProgress, PermissionDenied
    from .store.pins import collect, history

    with open_store(_store_url(ctx, redis_url)) as store:
        notes = []
        try:
            for info in collect(store, name):
                notes.append(f"deleted generation {info.generation}: no pin holds it any more")
        except (LoadInProgress, PermissionDenied) as exc:
            notes.append(f"retired generations not collected: {exc}")
        gens = history(store, name)
    if as_json:
        for g in gens:
            click.echo(json.dumps(_generation_json(g), sort_keys=True))
        return
    for note in notes:
        click.echo(f"vecserve: {note}", err=True)
    row = "{:>4}  {:<8} {:>12} {:>5} {:<5} {:<19}  {}".format
    click.echo(row("GEN", "STATE", "VECTORS", "DIM", "CODEC", "LOADED (UTC)", "PINS"))
    for g in gens:
        m = g.info
        state = "live" if g.live else "kept" if g.kept else "pinned" if g.pins else "retired"
        pins = ", ".join(f"{p.holder} ({p.ttl:.0f}s left)" for p in g.pins) or "-"
        loaded = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(m.created))
        click.echo(row(m.generation, state, f"{m.count:,}", m.dim, m.codec, loaded, pins))


def _generation_json(g) -> dict:
    return {
        "generation": g.info.generation,
        "live": g.live,
        "kept": g.kept,
        "retired": g.retired,
        "prefix": g.info.prefix,
        "count": g.info.count,
        "pins": [{"holder": p.holder, "ttl": p.ttl} for p in g.pins],
    }


@models.command("rollback")
@model_name
@click.argument("generation", type=click.IntRange(min=1), required=False)
@redis_url_option
@click.pass_context
@friendly_errors
def models_rollback(ctx, name, generation, redis_url):
    """Make a retired GENERATION of model NAME live again (default: the one live before
    the current one), in one step: readers move to it as after a load, never mixing.

    Only retained generations can come back: pinned ones, or those kept because
    $VECSERVE_KEEP_GENERATIONS was set when the model was loaded. The generation it
    replaces is retired in turn (kept, pinned, or deleted).

    \b
    Example:
        VECSERVE_KEEP_GENERATIONS=2 vecserve load new.bin --key GOOGLE_W2V
        vecserve models rollback --key GOOGLE_W2V
        vecserve models rollback --key GOOGLE_W2V 7
    """
    from .connect import open_store
    from .store.pins import history, rollback

    with open_store(_store_url(ctx, redis_url)) as store:
        now, replaced = rollback(store, name, generation)
        left = {g.info.generation for g in history(store, name)}
    fate = "retired" if replaced.generation in left else "deleted (nothing keeps it)"
    click.echo(
        f"{name}: generation {now.generation} is live again ({now.count:,} vectors); "
        f"generation {replaced.generation} {fate}"
    )


@cli.command()
@click.argument("words", nargs=-1, required=True)
@model_option(help="The model.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON {word: vector}.")
@redis_url_option
@friendly_errors
def get(words, name, as_json, redis_url):
    """Print the vectors of WORDS from model --key (one round trip).

    For a fastText model, words outside its vocabulary get vectors built from their
    character n-grams (marked "from subwords").

    \b
    Example:
        vecserve get king queen --key GOOGLE_W2V
    """
    from .connect import open_store

    with open_store(redis_url) as store:
        info, matrix, in_vocab = store.read_rows_subwords(store.get_model(name), list(words))
    found = [True] * len(words) if info.subwords else in_vocab.tolist()
    built = (
        set() if not info.subwords else {w for w, ok in zip(words, in_vocab, strict=True) if not ok}
    )
    missing = [w for w, ok in zip(words, found, strict=True) if not ok]
    if as_json:
        click.echo(
            json.dumps({w: v.tolist() for w, v, ok in zip(words, matrix, found, strict=True) if ok})
        )
    else:
        for w, v, ok in zip(words, matrix, found, strict=True):
            if ok:
                shown = " ".join(f"{x:.4f}" for x in v[:8])
                more = " ..." if info.dim > 8 else ""
                note = ", from subwords" if w in built else ""
                click.echo(f"{w}\t[{shown}{more}] ({info.dim} dims{note})")
    if missing:
        raise click.ClickException(f"not in {name}: {', '.join(missing)}")


@cli.command()
@click.argument("words", nargs=-1, required=True)
@model_option(help="The model to search.")
@click.option(
    "--negative",
    "-n",
    multiple=True,
    metavar="WORD",
    help="A word to move away from (repeat for more), as gensim's negative=.",
)
@click.option(
    "--topn",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="How many neighbours.",
)
@click.option(
    "--approx",
    is_flag=True,
    help="Answer from the approximate index (built into the cache dir first if need be, "
    "as `load --ann` does); exact when the index cannot meet its recall target.",
)
@json_option('Print JSON: [["word", similarity], ...], gensim\'s answer.')
@redis_url_option
@friendly_errors
def similar(words, name, negative, topn, approx, as_json, redis_url):
    """Print the nearest neighbours of WORDS (their mean) in model --key: gensim's
    most_similar(positive=WORDS, negative=--negative, topn=--topn), exact by default.

    One line per neighbour: the similarity, then the token in quotes (a token may end in
    punctuation). The first call on a model builds its similarity snapshot in the cache
    dir ($VECSERVE_CACHE_DIR); later calls map it.

    \b
    Example:
        vecserve similar king --key GOOGLE_W2V
        vecserve similar king woman --negative man --topn 3 --key GOOGLE_W2V
        vecserve similar paris --key GOOGLE_W2V --approx --json
    """
    from .connect import open_store

    positive, negative = list(words), list(negative)
    with open_store(redis_url) as store:
        store.get_model(name)  # an unknown model before a word: ModelNotFound
        try:
            if approx:
                result = _similar_approx(store, name, positive, negative, topn)
            else:
                from .keyedvectors import RedisKeyedVectors

                with RedisKeyedVectors(name, store=store) as kv:
                    result = kv.most_similar(positive=positive, negative=negative, topn=topn)
        except VecserveError:
            raise
        except (KeyError, ValueError) as exc:  # gensim's errors for an unknown word
            raise click.ClickException(f"{name}: {exc.args[0] if exc.args else exc}") from exc
    if as_json:
        click.echo(json.dumps([[w, float(s)] for w, s in result]))
        return
    for w, s in result:
        click.echo(f"{s:.4f}  {json.dumps(w, ensure_ascii=False)}")


def _similar_approx(store, name, positive, negative, topn):
    """The approximate index's answer (as the service's ``approx=true``), built if need be."""
    try:
        from .search.ann import AnnManager, AnnParams
        from .search.planner import Planner, Query
        from .search.snapshot import IndexManager
    except ImportError as exc:
        raise click.ClickException(
            f"--approx needs the api extra: pip install 'vecserve[api]' ({exc})"
        ) from exc
    indexes = IndexManager(store)
    try:
        sim = indexes.get(name)
        manager = AnnManager(enabled=True, params=AnnParams())
        manager.get(sim, wait=True)
        query = Query(positive=tuple(positive), negative=tuple(negative), topn=topn, approx=True)
        answer = Planner(sim, name=name, ann=manager).answer(query)
    finally:
        indexes.close()
    if not answer.approximate:
        click.echo(f"vecserve: answered exactly ({answer.approximate_status})", err=True)
    return answer.results


@cli.group()
def server():
    """The embedded valkey-server (used when no --redis-url is given).

    It starts by itself with the first command that needs it and stays up, so every
    later command attaches in milliseconds. Its data dir is $VECSERVE_DATA_DIR.

    \b
    Example:
        vecserve server status
        vecserve server stop
    """


def _data_dir_option(f):
    return click.option(
        "--data-dir",
        default=None,
        type=click.Path(file_okay=False),
        help="Its data dir. Default: $VECSERVE_DATA_DIR, else the user data dir.",
    )(f)


@server.command("start")
@_data_dir_option
@friendly_errors
def server_start(data_dir):
    """Start the embedded server (or say that it runs).

    \b
    Example:
        vecserve server start
    """
    from .embedded import EmbeddedServer

    srv = EmbeddedServer(data_dir)
    up = srv.status()
    if up is None:
        srv.acquire().release()
        up = srv.status()
    click.echo(f"embedded server running: pid {up['pid']}, socket {up['socket']}")


@server.command("stop")
@_data_dir_option
@friendly_errors
def server_stop(data_dir):
    """Stop the embedded server, saving its data first only if some is unsaved.

    \b
    Example:
        vecserve server stop
    """
    from .embedded import EmbeddedServer

    srv = EmbeddedServer(data_dir)
    up = srv.status()
    if up is None or not srv.stop():
        click.echo("embedded server is not running")
        return
    what = "saved its changes" if up["unsaved_changes"] else "nothing to save"
    click.echo(f"embedded server stopped (pid {up['pid']}; {what})")


@server.command("status")
@_data_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@friendly_errors
def server_status(data_dir, as_json):
    """Pid, socket, data dir, memory and its eviction policy, models, and whether
    everything is saved.

    Exits 3 when the server is not running.

    \b
    Example:
        vecserve server status
    """
    from .embedded import EmbeddedServer
    from .store import Store

    srv = EmbeddedServer(data_dir)
    up = srv.status()
    if up is None:
        if as_json:
            click.echo(json.dumps({"running": False, "data_dir": str(srv.data_dir)}))
        else:
            click.echo(f"embedded server is not running (data dir {srv.data_dir})")
        sys.exit(3)
    store = Store.from_url(srv.url)
    try:
        models = [m.name for m in store.list_models()]
        facts = store.memory_facts()
    finally:
        store.close()
    up = {"running": True, **up, "models": models}
    if facts:
        up.update(maxmemory=facts[0].maxmemory, maxmemory_policy=facts[0].policy)
    if as_json:
        click.echo(json.dumps(up))
        return
    saved = (
        "yes"
        if up["saved"]
        else ("saving now" if up["saving"] else f"no ({up['unsaved_changes']:,} changes)")
    )
    click.echo(
        f"pid       {up['pid']}\n"
        f"socket    {up['socket']}\n"
        f"data dir  {up['data_dir']}\n"
        f"memory    {up['used_memory_human']} ({up['used_memory']:,} bytes)\n"
        f"policy    {facts[0].describe() if facts else 'unknown (INFO refused)'}\n"
        f"models    {len(models)}{': ' + ', '.join(models) if models else ''}\n"
        f"saved     {saved}"
    )


@cli.command()
@click.argument("role", type=click.Choice(["worker", "api", "loader", "maintainer", "admin"]))
@click.option("--user", default=None, help="Redis user name (default vecserve-ROLE).")
@model_option(required=False, help="The model a loader may write (required for a loader).")
@alias_option("--model", "name")
@click.option(
    "--password-env",
    metavar="VAR",
    default=None,
    help="Take the password from environment variable VAR (default: a fresh random one).",
)
@click.option(
    "--aclfile",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the user into this ACL file (the server's --aclfile) instead of printing "
    "an ACL SETUSER line; other users' lines are kept, and a file that does not name the "
    "default user gets it disabled.",
)
@friendly_errors
def acl(role, user, name, password_env, aclfile):
    """Print the ACL SETUSER line of a least-privilege Redis user for ROLE, or write it
    into an ACL file (--aclfile) that the server loads at every start.

    worker and api are read-only (no INFO, no @dangerous commands), but a worker may hold
    pins (`kv.pin()`: SET, SADD, SREM, DEL on vecserve's pin keys only); a loader writes
    only the keys of its --key model and vecserve's registry; a maintainer writes every model
    (loads, `models cleanup`); admin may do everything. The password is a fresh random
    one unless --password-env names a variable holding it: run the line with redis-cli,
    then put the user and password in the URL. In an ACL file the password is kept as its
    SHA-256.

    \b
    Example:
        vecserve acl worker --user celery | redis-cli
        vecserve acl loader --key GOOGLE_W2V
        export VECSERVE_REDIS_URL=redis://celery:PASSWORD@redis:6379/0
        VECSERVE_API_PW=... vecserve acl api --password-env VECSERVE_API_PW --aclfile users.acl
    """
    import os

    from .acl import aclfile_line, setuser_line, write_aclfile

    password = None
    if password_env is not None:
        password = os.environ.get(password_env)
        if not password:
            raise click.UsageError(f"--password-env {password_env}: ${password_env} is not set")
    line = setuser_line(role, user=user, model=name, password=password)
    if aclfile is None:
        click.echo(line)
        return
    for done in write_aclfile(aclfile, [aclfile_line(line)]):
        click.echo(f"{aclfile}: {done}", err=True)
    if password is None:  # shown once: the file keeps only its hash
        click.echo(f"password of {line.split()[2]}: {line.split()[5][1:]}")


@cli.command()
@redis_url_option
@friendly_errors
def demo(redis_url):
    """Load a small model that ships with gensim and show it answering like gensim.

    Loads gensim's ``lee_fasttext.vec`` test vectors as model DEMO (into the embedded
    server unless --redis-url / $VECSERVE_REDIS_URL is set), then reads them back through
    RedisKeyedVectors and compares the answers with gensim's own KeyedVectors.

    \b
    Example:
        vecserve demo
    """
    from gensim.models import KeyedVectors
    from gensim.test.utils import datapath

    from .connect import open_store
    from .keyedvectors import RedisKeyedVectors
    from .loader import load_file

    path = datapath("lee_fasttext.vec")
    with open_store(redis_url) as store:
        click.echo(f"loading gensim's test vectors lee_fasttext.vec ({path})")
        click.echo(f"  into {store.url} as model DEMO")
        info = load_file(path, name="DEMO", store=store, progress=False, restart=True)
        click.echo(f"DEMO: {info.count:,} vectors x {info.dim}, generation {info.generation}")
        ref = KeyedVectors.load_word2vec_format(path)
        with RedisKeyedVectors("DEMO", store=store) as kv:
            vec = kv["government"]
            click.echo(f"kv['government'][:4] = {np.array2string(vec[:4], precision=4)}")
            click.echo(f"  identical to gensim: {np.array_equal(vec, ref['government'])}")
            batch = kv[["police", "court", "minister"]]
            click.echo(f"kv[['police', 'court', 'minister']].shape = {batch.shape}  (one MGET)")
            sims = kv.most_similar("government", topn=5)
            shown = ", ".join(f"{w!r} {s:.3f}" for w, s in sims)  # a token may end in ","
            click.echo(f"kv.most_similar('government', topn=5) = {shown}")
            same = [w for w, _ in sims] == [w for w, _ in ref.most_similar("government", topn=5)]
            click.echo(f"  same as gensim: {same}")
            try:
                kv["australia"]
            except KeyError as exc:
                click.echo(f"kv['australia'] -> KeyError: {exc}")
        click.echo("next: vecserve models; vecserve get police court --key DEMO")


def main() -> None:
    cli(prog_name="vecserve")


if __name__ == "__main__":
    main()
