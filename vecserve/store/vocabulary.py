"""Reads of a generation's vocabulary, counts and text blob."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..errors import ModelDamaged
from .keys import decode_tokens, text_key, vocab_key, vocab_sizes_key
from .records import ModelInfo, unpack_vocab
from .wire import Round, Steps

__all__ = ["VocabularyReads"]


class VocabularyReads:
    """The :class:`~.registry.Store`'s reads of vocabularies."""

    def vocab(self, model: ModelInfo, start: int = 0, stop: int | None = None) -> list[str]:
        """Tokens ``start:stop`` in model order (only the blobs that hold them are read)."""
        return self.run(self.vocab_steps(model, start, stop))

    def vocab_steps(
        self, model: ModelInfo, start: int = 0, stop: int | None = None
    ) -> Steps[list[str]]:
        """:meth:`vocab` as steps."""
        stop = model.count if stop is None else min(stop, model.count)
        if start >= stop:
            return []
        what = f"reading the vocabulary of {model.name!r}"
        (sizes,) = yield Round([("GET", vocab_sizes_key(model.prefix))], what)
        if sizes is None:
            raise _vocabulary_gone(model, "its index of blob sizes")
        sizes = np.frombuffer(sizes, dtype="<u4")
        bounds = np.concatenate(([0], np.cumsum(sizes, dtype=np.int64)))
        first = int(np.searchsorted(bounds, start, side="right")) - 1
        last = int(np.searchsorted(bounds, stop, side="left"))
        raw: list[bytes] = []
        for lo in range(first, last, 64):  # 64 blobs (~100k tokens) per LRANGE
            (blobs,) = yield Round(
                [("LRANGE", vocab_key(model.prefix), lo, min(lo + 64, last) - 1)], what
            )
            if len(blobs) < min(lo + 64, last) - lo:
                raise _vocabulary_gone(model, f"blobs {lo + len(blobs)} to {last - 1}")
            for blob in blobs:
                raw.extend(unpack_vocab(blob))
        skip = start - int(bounds[first])
        return decode_tokens(raw[skip : skip + stop - start])

    def iter_vocab(self, model: ModelInfo, *, chunk: int = 100_000) -> Iterator[list[str]]:
        """The vocabulary in chunks, for bounded-memory scans of big models."""
        for lo in range(0, model.count, chunk):
            yield self.vocab(model, lo, lo + chunk)

    def counts(self, model: ModelInfo) -> np.ndarray | None:
        """Per-token counts in vocab order, or None if the source had none."""
        return self.run(self.counts_steps(model))

    def counts_steps(self, model: ModelInfo) -> Steps[np.ndarray | None]:
        """:meth:`counts` as steps."""
        if not model.has_counts:
            return None
        (raw,) = yield Round([("GET", model.counts_key)], f"reading counts of {model.name!r}")
        if raw is None and model.count:
            raise ModelDamaged(
                model.name,
                model.generation,
                [],
                0,
                what="its word counts are gone from Redis (evicted, lost in a failover, or "
                "deleted by hand)",
            )
        return np.frombuffer(raw or b"", dtype="<i8").astype(np.int64)

    def text_blob_steps(self, model: ModelInfo) -> Steps[bytes]:
        """The generation's text blob (:func:`~.layout.text_key`; b"" if none), one GET."""
        (raw,) = yield Round(
            [("GET", text_key(model.prefix))], f"reading the tokenizer of {model.name!r}"
        )
        return raw or b""


def _vocabulary_gone(model: ModelInfo, part: str) -> ModelDamaged:
    return ModelDamaged(
        model.name,
        model.generation,
        [],
        0,
        what=f"its vocabulary ({part}) is gone from Redis (evicted, lost in a failover, or "
        "deleted by hand)",
    )
