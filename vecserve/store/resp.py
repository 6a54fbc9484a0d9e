"""RESP by hand: every request vecserve sends on its own connections, the bulk ones where
redis-py's packing costs more than the server's work (see each), and the reader of their
replies.

:func:`pack` packs any commands (the sans-I/O reads of :mod:`.wire`); :data:`GET_HEADS`
and :func:`get_head` the one-word read's GET; :func:`resp_mset` a batch of fixed-size
vectors; :func:`resp_exists` the integrity check's EXISTS, with array operations.
:func:`reply_reader` parses the replies on those connections (:mod:`.syncwire`,
:mod:`.asyncwire`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import hiredis
import numpy as np
import redis
from redis._parsers import BaseParser

__all__ = [
    "GET_HEADS",
    "NEED",
    "PACK_CHUNK",
    "get_head",
    "pack",
    "pack_yielding",
    "packed",
    "reply_reader",
    "resp_exists",
    "resp_mset",
]

#: :func:`pack_yielding` packs this many arguments between two turns of the event loop.
PACK_CHUNK = 1024


def resp_exists(key_prefix: bytes, lens: np.ndarray, buf: np.ndarray) -> bytes:
    """The RESP bytes of ``EXISTS P:t1 P:t2 ...`` for a single server's keys: ``key_prefix``
    (:func:`~.keys.vector_key_prefix`, or :func:`~.keys.ngram_key_prefix` with bucket
    numbers for tokens) joined to tokens given as lengths and concatenated bytes
    (:func:`~.records.vocab_parts`), built with array operations: a Python loop costs
    ~1 us a key, this ~0.05.

    >>> from vecserve.store.records import pack_vocab, vocab_parts
    >>> resp_exists(b"M:", *vocab_parts(pack_vocab([b"car", b"x" * 9])))
    b'*3\\r\\n$6\\r\\nEXISTS\\r\\n$5\\r\\nM:car\\r\\n$11\\r\\nM:xxxxxxxxx\\r\\n'
    """
    pre = np.frombuffer(key_prefix, dtype=np.uint8)
    klen = lens + len(pre)
    digits = np.ones(len(klen), dtype=np.int64)
    for power in range(1, 19):
        digits += klen >= 10**power
    size = 1 + digits + 2 + klen + 2  # $<len>\r\n<key>\r\n
    head = b"*%d\r\n$6\r\nEXISTS\r\n" % (len(klen) + 1)
    starts = len(head) + np.cumsum(size) - size
    out = np.empty(len(head) + int(size.sum()), dtype=np.uint8)
    out[: len(head)] = np.frombuffer(head, dtype=np.uint8)
    out[starts] = ord("$")
    for d in range(int(digits.max(initial=1))):
        rows = np.flatnonzero(digits > d)
        out[starts[rows] + 1 + d] = 48 + (klen[rows] // 10 ** (digits[rows] - 1 - d)) % 10
    key = starts + 1 + digits + 2
    out[key - 2], out[key - 1] = 13, 10
    for j, byte in enumerate(pre.tolist()):
        out[key + j] = byte
    total = int(lens.sum())
    if total:
        out[np.repeat(key + len(pre) - (np.cumsum(lens) - lens), lens) + np.arange(total)] = buf[
            :total
        ]
    out[key + klen], out[key + klen + 1] = 13, 10
    return out.tobytes()


def pack(commands: Sequence[tuple | bytes]) -> bytes:
    """The RESP request of ``commands`` (arguments: bytes, str or int; a ``bytes``
    command is one already packed, sent as it is).

    >>> pack([("GET", b"k")])
    b'*2\\r\\n$3\\r\\nGET\\r\\n$1\\r\\nk\\r\\n'
    """
    out = []
    for cmd in commands:
        if type(cmd) is bytes:
            out.append(cmd)
        else:
            out.append(b"*%d\r\n" % len(cmd))
            out.append(_pack_args(cmd))
    return b"".join(out)


def _pack_args(args: Sequence) -> bytes:
    raw = [a if type(a) is bytes else a.encode() if isinstance(a, str) else b"%d" % a for a in args]
    return b"".join([b"$%d\r\n%b\r\n" % (len(a), a) for a in raw])


async def pack_yielding(commands: Sequence[tuple | bytes]) -> bytes:
    """:func:`pack`, ``PACK_CHUNK`` arguments at a time, letting the loop run in between."""
    out = []
    for cmd in commands:
        if type(cmd) is bytes:
            out.append(cmd)
            continue
        out.append(b"*%d\r\n" % len(cmd))
        for i in range(0, len(cmd), PACK_CHUNK):
            out.append(_pack_args(cmd[i : i + PACK_CHUNK]))
            await asyncio.sleep(0)
    return b"".join(out)


def packed(*args) -> bytes:
    """One command packed once (a request sent again and again)."""
    return pack([args])


def get_head(n: int) -> bytes:
    """What precedes an ``n``-byte key in a GET request (:data:`GET_HEADS` for short keys).

    >>> get_head(5) + b"M:car\\r\\n" == pack([("GET", b"M:car")])
    True
    """
    return b"*2\r\n$3\r\nGET\r\n$%d\r\n" % n


#: :func:`get_head` of every key length under 256, made once (the hot path of ``kv[word]``).
GET_HEADS = [get_head(n) for n in range(256)]


def resp_mset(keys: Sequence[bytes], encoded: np.ndarray) -> list[bytes | memoryview]:
    """The RESP2 bytes of ``MSET k1 v1 k2 v2 ...`` for fixed-size values, zero-copy values.

    redis-py packs a 1,700-vector MSET at ~1.1 us a vector; this costs ~0.25 us, and the
    values are views into ``encoded`` rather than copies.

    >>> b"".join(resp_mset([b"a"], np.zeros((1, 2), np.uint8)))
    b'*3\\r\\n$4\\r\\nMSET\\r\\n$1\\r\\na\\r\\n$2\\r\\n\\x00\\x00\\r\\n'
    """
    size = encoded.shape[1]
    mv = memoryview(np.ascontiguousarray(encoded)).cast("B")
    head = b"\r\n$%d\r\n" % size
    parts: list[bytes | memoryview] = [b"*%d\r\n$4\r\nMSET\r\n" % (2 * len(keys) + 1)]
    append = parts.append
    for i, k in enumerate(keys):
        append(b"$%d\r\n%s%s" % (len(k), k, head))
        append(mv[i * size : (i + 1) * size])
        append(b"\r\n")
    return parts


#: What a :func:`reply_reader` answers while it holds no whole reply yet.
NEED = object()


def reply_reader() -> hiredis.Reader:
    """A RESP reader whose error replies come back as redis-py's exception objects (the
    classes :func:`~.boundary.translated` knows), not raised; :data:`NEED` until a reply
    is whole.

    >>> r = reply_reader()
    >>> r.feed(b"$3\\r\\nab"); r.gets() is NEED
    True
    >>> r.feed(b"c\\r\\n-ERR no\\r\\n"); r.gets(), type(r.gets()).__name__
    (b'abc', 'ResponseError')
    """
    return hiredis.Reader(
        protocolError=redis.exceptions.InvalidResponse,
        replyError=BaseParser.parse_error,
        notEnoughData=NEED,
    )
