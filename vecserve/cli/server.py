"""``vecserve server``: start, stop and look at the embedded valkey-server."""

from __future__ import annotations

import json
import sys

import click

from ..clierrors import friendly_errors
from .root import cli

__all__ = ["server"]


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
    from ..embedded import EmbeddedServer

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
    from ..embedded import EmbeddedServer

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
    from ..embedded import EmbeddedServer
    from ..store import Store

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
