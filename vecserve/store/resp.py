"""RESP requests packed by hand, where redis-py's packing costs more than the server's
work (see each function)."""

from __future__ import annotations

import numpy as np


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
