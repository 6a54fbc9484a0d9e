"""Click options that commands in different layers share (``vecserve``, ``vecserve serve``,
``vecserve train``), declared once so their names and help cannot drift apart.

An option's value is None when the flag is not given; the default (a ``VECSERVE_*``
variable, then the built-in one) is then decided where the value is used, through
:mod:`vecserve.config` or the service's settings, never by click.
"""

from __future__ import annotations

import click

__all__ = ["redis_url_option"]


def redis_url_option(f):
    """``--redis-url URL``: where the command's Redis is (None: ``$VECSERVE_REDIS_URL``,
    else the embedded server, as :func:`vecserve.connect.connect` decides)."""
    return click.option(
        "--redis-url",
        default=None,
        metavar="URL",
        help="Redis/Valkey URL (redis://, rediss://, unix://); a cluster node URL works too. "
        "Default: $VECSERVE_REDIS_URL, else vecserve's embedded server.",
    )(f)
