"""``vecserve acl`` (least-privilege Redis users) and ``vecserve demo``."""

from __future__ import annotations

import click
import numpy as np

from ..clierrors import friendly_errors
from ..clioptions import alias_option, model_option, redis_url_option
from .root import cli

__all__ = ["acl", "demo"]


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

    from ..acl import aclfile_line, setuser_line, write_aclfile

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

    from ..connect import open_store
    from ..keyedvectors import RedisKeyedVectors
    from ..loader import load_file

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
