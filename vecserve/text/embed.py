"""``embed(texts)``: text in, one vector per text out, on the reader core.

:func:`embed_steps` is the one text read, written once as steps (:mod:`vecserve.store.wire`)
for every client (sync, asyncio, pinned views, the HTTP service):

1. the registry entry (its ``text`` spec; :class:`~vecserve.errors.NoTokenizer` when the
   model has none and no override is given);
2. the generation's tokenizer, made from its text blob once per generation and kept
   (:class:`TextState`, one per reader);
3. the batch cut into tokens (:mod:`vecserve.text.tokenize`), its *distinct* tokens read in
   ONE :meth:`Reader.lookup_steps` (the cache applies; fastText models fill unknown words
   from their n-grams there);
4. pooled (:mod:`vecserve.text.pool`). Should the rows come from a newer generation than
   the tokenizer (a reload in between), the batch is cut again with the new one.

Input limits (:data:`MAX_TEXTS`, :data:`MAX_TEXT_CHARS`) and text that is not ``str``
(bytes that are not UTF-8) raise :class:`~vecserve.errors.TextRejected` naming the text.

>>> got = store.run(embed_steps(reader, ["the cat sat"]))   # doctest: +SKIP
>>> got.vectors.shape, got.used.tolist(), got.unknown.tolist()  # doctest: +SKIP
((1, 256), [3], [0])
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ..errors import ModelDamaged, NoTokenizer, TextRejected
from ..reader import Reader
from ..store import ModelInfo
from ..store.wire import Steps
from .pool import pool
from .spec import TextSpec
from .tokenize import StaticTokenizer, WordTokenizer, sif_weights, unpack_words

__all__ = [
    "MAX_TEXTS",
    "MAX_TEXT_CHARS",
    "Embedding",
    "TextState",
    "check_texts",
    "embed",
    "embed_steps",
]

#: the most texts one call embeds (a bigger batch: split it)
MAX_TEXTS = 10_000
#: the longest text, in characters (1,000,000: about 150,000 words)
MAX_TEXT_CHARS = 1_000_000


class Embedding(NamedTuple):
    """One batch's answer, every vector of generation ``info``."""

    vectors: np.ndarray  # float32 (len(texts), dims)
    used: np.ndarray  # int64 per text: tokens pooled
    unknown: np.ndarray  # int64 per text: tokens without a row (or dropped as unknown)
    info: ModelInfo
    hits: int  # distinct tokens served by the vector cache


def check_texts(texts) -> list[str]:
    """``texts`` as a list of str (one str: a batch of one), or TextRejected saying which
    text is wrong and why.

    >>> check_texts(["a", b"b"])
    ['a', 'b']
    >>> check_texts([b"\\xff"])
    Traceback (most recent call last):
    ...
    vecserve.errors.TextRejected: text 0 is not UTF-8: invalid start byte at byte 0
    """
    out = [texts] if isinstance(texts, (str, bytes)) else list(texts)
    if len(out) > MAX_TEXTS:
        raise TextRejected(f"{len(out):,} texts in one batch; the limit is {MAX_TEXTS:,}")
    for i, t in enumerate(out):
        if isinstance(t, (bytes, bytearray)):
            try:
                t = out[i] = bytes(t).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise TextRejected(
                    f"text {i} is not UTF-8: {exc.reason} at byte {exc.start}"
                ) from None
        if not isinstance(t, str):
            raise TextRejected(f"text {i} is a {type(t).__name__}, not a string")
        if len(t) > MAX_TEXT_CHARS:
            raise TextRejected(
                f"text {i} has {len(t):,} characters; the limit is {MAX_TEXT_CHARS:,}"
            )
    return out


class TextState:
    """A reader's tokenizers, one per generation (made from its text blob once)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._made: dict[tuple[str, str, bool], StaticTokenizer | WordTokenizer] = {}

    def tokenizer_steps(self, reader: Reader, info: ModelInfo, spec: TextSpec, sif: bool):
        """The generation's tokenizer; a word model's word frequencies only when ``sif``
        (12 bytes a word, read and kept only by workers that pool that way)."""
        key = (info.prefix, spec.to_json(), sif)
        tok = self._made.get(key)
        if tok is not None:
            return tok
        blob = b""
        if spec.kind == "tokenizer" or spec.joiner or (sif and spec.sif):
            blob = yield from reader.store.text_blob_steps(info)
        if spec.kind == "tokenizer":
            if not blob:
                raise ModelDamaged(
                    f"model {info.name!r} (generation {info.generation}) lost its tokenizer "
                    "(its text blob is gone); load it again"
                )
            tok = StaticTokenizer(blob, spec)
        else:
            phrases, freq = unpack_words(blob)
            tok = WordTokenizer(spec, phrases, freq if sif else None)
        with self._lock:
            if len(self._made) > 8:  # old generations' tokenizers
                self._made.clear()
            self._made[key] = tok
        return tok


_STATES: weakref.WeakKeyDictionary[Reader, TextState] = weakref.WeakKeyDictionary()
_STATES_LOCK = threading.Lock()


def _state(reader: Reader) -> TextState:
    state = _STATES.get(reader)
    if state is None:
        with _STATES_LOCK:
            state = _STATES.setdefault(reader, TextState())
    return state


def spec_of(info: ModelInfo, tokenizer: dict | None = None) -> TextSpec:
    """The model's text spec with the caller's overrides (``tokenizer``: TextSpec fields)."""
    if info.text:
        spec = TextSpec.from_json(info.text)
    elif tokenizer:
        spec = TextSpec(kind="words", family="words", pre_normalize=True)
    else:
        raise NoTokenizer(
            f"model {info.name!r} has no recorded tokenizer (loaded before vecserve cut text, "
            "or from arrays): load it again, or pass tokenizer={...} (a word rule)"
        )
    if tokenizer:
        if spec.kind == "tokenizer" and set(tokenizer) & {"pattern", "lowercase", "joiner"}:
            raise TextRejected("a static model's tokenizer is its own: only truncation changes")
        try:
            spec = spec.but(**tokenizer)
        except TypeError as exc:
            raise TextRejected(f"unknown tokenizer option: {exc}") from None
    return spec


def embed_steps(
    reader: Reader,
    texts: Sequence[str],
    *,
    normalize: bool | None = None,
    dims: int | None = None,
    tokenizer: dict | None = None,
    pooling: str = "mean",
) -> Steps[Embedding]:
    """One vector per text (see the module docstring); ``normalize`` None: the model's
    default; ``dims``: the first ``dims`` dimensions (Matryoshka), normalised after;
    ``pooling``: ``"mean"`` or ``"sif"`` (word models with counts)."""
    texts = check_texts(texts)
    if pooling not in ("mean", "sif"):
        raise TextRejected(f"pooling must be 'mean' or 'sif', got {pooling!r}")
    state = _state(reader)
    info = yield from reader.info_steps(known=True)
    for _ in range(3):
        spec = spec_of(info, tokenizer)
        if dims is not None and not 0 < dims <= info.dim:
            raise TextRejected(f"dims must be 1..{info.dim} for model {info.name!r}, got {dims}")
        tok = yield from state.tokenizer_steps(reader, info, spec, pooling == "sif")
        if pooling == "sif" and getattr(tok, "freq", None) is None:
            raise TextRejected(
                f"model {info.name!r} has no word counts: SIF pooling needs them "
                "(a word model loaded from a file with counts, or trained by vecserve)"
            )
        cut = tok.cut(texts)
        got = yield from reader.lookup_steps(cut.distinct)
        if got.info.generation == info.generation:
            break
        info = got.info  # a reload committed in between: cut again with its tokenizer
    pooled = pool(
        got.rows,
        got.found,
        cut,
        normalize=spec.normalize if normalize is None else normalize,
        pre_normalize=spec.pre_normalize,
        dims=dims,
        weights=sif_weights(tok.freq, cut.distinct) if pooling == "sif" else None,
    )
    return Embedding(pooled.vectors, pooled.used, pooled.unknown, got.info, got.hits)


def embed(self, texts, *, normalize=None, dims=None, tokenizer=None, pooling="mean") -> Embedding:
    """One vector per text: ``kv.embed(["a job title", "a list of skills"])``.

    The texts are cut into the model's tokens (a static model's own tokenizer; for word
    models the rule recorded at load: pattern, case, phrases; fastText models' unknown
    words through their n-grams), the batch's distinct tokens read in one round trip
    (the cache applies), and each text's rows averaged: Model2Vec's
    ``StaticModel.encode``, WordLlama's ``embed``, gensim's ``get_mean_vector`` of the
    same tokens.

    Parameters
    ----------
    texts : str or list of str
        A str is a batch of one. At most ``MAX_TEXTS`` texts of ``MAX_TEXT_CHARS``
        characters each (:mod:`vecserve.text.embed`).
    normalize : bool, optional
        Unit-length vectors; default: the model's own setting.
    dims : int, optional
        Keep the first ``dims`` dimensions (Matryoshka models), normalised after.
    tokenizer : dict, optional
        Overrides of the model's text rule (:class:`vecserve.text.TextSpec` fields,
        e.g. ``{"lowercase": True}`` or ``{"max_tokens": 128}``).
    pooling : {"mean", "sif"}
        ``"sif"``: each token weighted by ``a / (a + p(token))``, ``p`` from the model's
        counts (word models loaded with counts; ``a`` = 1e-3).

    Returns
    -------
    Embedding
        ``vectors`` (float32, one row per text), ``used`` and ``unknown`` (per text,
        tokens pooled and tokens without a row), ``info`` (the generation read).
        A text with no token used (empty, or only unknown tokens) has the zero vector.
        The client's ``missing=`` policy does not apply: unknown tokens are counted.

    Examples
    --------
    >>> kv.embed(["the cat sat on the mat"]).vectors.shape   # doctest: +SKIP
    (1, 256)
    """
    return (
        yield from embed_steps(
            self._reader,
            texts,
            normalize=normalize,
            dims=dims,
            tokenizer=tokenizer,
            pooling=pooling,
        )
    )
