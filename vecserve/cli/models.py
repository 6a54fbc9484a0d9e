"""``vecserve models``: list models and unfinished loads; info, check, delete, cleanup,
history and rollback of one model."""

from __future__ import annotations

import functools
import json
import sys
import time

import click

from ..clierrors import friendly_errors
from ..clioptions import json_option, model_option, redis_url_option
from ..errors import PermissionDenied
from .root import cli

__all__ = ["model_name", "models"]


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
    from ..connect import open_store
    from ..store.lease import holder_is_dead

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

    from ..connect import open_store

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

    from ..connect import open_store
    from ..errors import ModelNotFound, PermissionDenied

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
        from ..search.ann import disk_status
        from ..search.snapshot import snapshot_dir
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
    from ..connect import open_store
    from ..store.generations import drop_history

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
    from ..connect import open_store
    from ..store import cleanup_loads
    from ..store.generations import collect_all

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
    from ..connect import open_store
    from ..errors import LoadInProgress, PermissionDenied
    from ..store.generations import collect, history

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
    from ..connect import open_store
    from ..store.generations import history, rollback

    with open_store(_store_url(ctx, redis_url)) as store:
        now, replaced = rollback(store, name, generation)
        left = {g.info.generation for g in history(store, name)}
    fate = "retired" if replaced.generation in left else "deleted (nothing keeps it)"
    click.echo(
        f"{name}: generation {now.generation} is live again ({now.count:,} vectors); "
        f"generation {replaced.generation} {fate}"
    )
