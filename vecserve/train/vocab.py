"""The vocabulary and encoding passes.

:func:`scan_corpus` reads the corpus once: it counts tokens under provisional ids and
keeps those ids, then applies ``min_count`` / ``max_final_vocab``, sorts by frequency and
rewrites the ids in place into one int32 array of word ids plus sentence bounds (in
memory, or in a memory-mapped temporary file for big corpora). With gensim's
``max_vocab_size`` pruning, :func:`build_vocab` counts (pruning as it reads) and
:func:`encode_corpus` encodes in a second pass. The per-word tables the kernels take
are built from its counts in :mod:`vecserve.train.tables`.

>>> v = build_vocab([["a", "b", "a"], ["a", "c"]], min_count=1)
>>> v.words, v.counts.tolist()
(['a', 'b', 'c'], [3, 1, 1])
>>> enc = encode_corpus([["a", "b", "a"], ["a", "c"]], v)
>>> enc.words.tolist(), enc.bounds.tolist()
([0, 1, 0, 0, 2], [0, 3, 5])
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..errors import TrainingError
from .corpus import Corpus, corpus_files, iter_sentences

__all__ = [
    "EncodedCorpus",
    "Scan",
    "Vocab",
    "build_vocab",
    "count_corpus",
    "count_pruned",
    "encode_corpus",
    "encode_share",
    "finish_vocab",
    "merge_counts",
    "merge_shares",
    "prune_counts",
    "scan_corpus",
]

#: Tokens gathered before one ``Counter.update`` / one encoding batch.
BATCH_TOKENS = 1 << 18
_BLOCK = 1 << 22
#: Encoded corpora larger than this many bytes go to a memory-mapped temporary file.
MEMMAP_BYTES = 2 << 30


@dataclass
class Vocab:
    """Words sorted by decreasing count, and the raw corpus statistics."""

    words: list[str]
    counts: np.ndarray  # int64, same order as words
    keys: list = field(repr=False)  # the tokens as the reader yields them (bytes or str)
    raw_words: int = 0  # tokens read, all words
    raw_vocab: int = 0  # distinct tokens seen (after max_vocab_size pruning)
    order: np.ndarray | None = field(default=None, repr=False)  # kept words' first-seen ranks

    def __len__(self) -> int:
        return len(self.words)


@dataclass
class EncodedCorpus:
    """The corpus as word ids: sentence i is ``words[bounds[i]:bounds[i + 1]]``."""

    words: np.ndarray  # int32, possibly an np.memmap
    bounds: np.ndarray  # int64, n_sentences + 1

    @property
    def n_words(self) -> int:
        return int(self.bounds[-1])

    @property
    def n_sentences(self) -> int:
        return len(self.bounds) - 1


def _batches(corpus: Corpus):
    """Yield (tokens, sentence_lengths) batches of about BATCH_TOKENS tokens."""
    toks: list = []
    lens: list[int] = []
    for sentence in iter_sentences(corpus):
        toks.extend(sentence)
        lens.append(len(sentence))
        if len(toks) >= BATCH_TOKENS:
            yield toks, lens
            toks, lens = [], []
    if lens:
        yield toks, lens


def build_vocab(
    corpus: Corpus,
    *,
    min_count: int = 5,
    max_vocab_size: int | None = None,
    max_final_vocab: int | None = None,
) -> Vocab:
    """Count the corpus and keep the words to train, most frequent first.

    ``max_vocab_size`` bounds memory while counting: whenever more distinct tokens are
    held, those seen fewer than ``n`` times are dropped (``n`` = 1, 2, ... each time, as
    gensim does). ``max_final_vocab`` raises ``min_count`` until at most that many words
    remain. Ties keep first-seen order.
    """
    keys, counts, raw = count_pruned(corpus, max_vocab_size)
    if raw == 0:
        raise TrainingError("corpus is empty: no tokens to train on")
    return _finish_vocab(keys, counts, raw, min_count, max_final_vocab)


def count_pruned(corpus: Corpus, max_vocab_size: int | None) -> tuple[list, np.ndarray, int]:
    """(keys in first-seen order, counts, tokens read), pruned as gensim prunes.

    >>> count_pruned([["a", "b", "a"], ["c"]], 2)
    (['a'], array([2]), 4)
    """
    counter: Counter = Counter()
    raw = 0
    min_reduce = 1
    for toks, _ in _batches(corpus):
        counter.update(toks)
        raw += len(toks)
        if max_vocab_size and len(counter) > max_vocab_size:
            counter = Counter({w: c for w, c in counter.items() if c > min_reduce})
            min_reduce += 1
    keys = list(counter)
    return keys, np.fromiter(counter.values(), dtype=np.int64, count=len(keys)), raw


def prune_counts(keys: list, counts: np.ndarray, max_vocab_size: int) -> tuple[list, np.ndarray]:
    """Drop the rarest keys (count <= 1, then <= 2, ...) until at most *max_vocab_size*.

    >>> prune_counts(["a", "b", "c"], np.array([3, 1, 2]), 2)
    (['a', 'c'], array([3, 2]))
    """
    min_reduce = 1
    counts = np.asarray(counts, np.int64)
    while len(counts) > max_vocab_size:
        keep = np.flatnonzero(counts > min_reduce)
        keys, counts = [keys[i] for i in keep.tolist()], counts[keep]
        min_reduce += 1
    return keys, counts


def _finish_vocab(keys, counts, raw, min_count, max_final_vocab) -> Vocab:
    """Apply min_count / max_final_vocab to first-seen-ordered (keys, counts), sort."""
    effective_min = max(min_count, 1)
    if max_final_vocab is not None and max_final_vocab < len(counts):
        nth = np.sort(counts)[::-1][max_final_vocab]
        effective_min = max(effective_min, int(nth) + 1)
    kept = np.flatnonzero(counts >= effective_min)
    if len(kept) == 0:
        raise TrainingError(
            f"no word occurs at least min_count={effective_min} times "
            f"(corpus has {raw} tokens, {len(counts)} distinct, most frequent seen "
            f"{int(counts.max())} times); lower min_count"
        )
    order = kept[np.argsort(-counts[kept], kind="stable")]
    words = []
    for i in order.tolist():
        k = keys[i]
        if isinstance(k, bytes):
            try:
                k = k.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise TrainingError(
                    f"corpus token {k[:40]!r} is not valid UTF-8; is this a text file?"
                ) from exc
        elif not isinstance(k, str):
            raise TrainingError(f"corpus tokens must be str, got {type(k).__name__}")
        words.append(k)
    return Vocab(
        words=words,
        counts=counts[order],
        keys=[keys[i] for i in order.tolist()],
        raw_words=raw,
        raw_vocab=len(counts),
        order=order,
    )


def encode_corpus(
    corpus: Corpus, vocab: Vocab, *, memmap_bytes: int = MEMMAP_BYTES, exact: bool = True
):
    """Encode *corpus* into word ids; out-of-vocabulary tokens are dropped.

    The array is allocated once at its final size (the vocabulary counts give it); above
    ``memmap_bytes`` it lives in an unlinked temporary file, so the page cache, not the
    process heap, holds it. ``exact=False``: *corpus* is a share of the corpus the
    vocabulary was counted on (so it holds fewer words; untouched pages cost nothing).
    """
    index = {k: i for i, k in enumerate(vocab.keys)}
    total = int(vocab.counts.sum())
    if total * 4 > memmap_bytes:
        with tempfile.TemporaryFile(prefix="vecserve-w2v-") as fh:  # the map outlives it
            words = np.memmap(fh, np.int32, "w+", shape=(total,))
    else:
        words = np.empty(total, np.int32)
    ends_parts = [np.zeros(1, np.int64)]
    pos = 0
    get = index.get
    for toks, lens in _batches(corpus):
        ids = np.fromiter(map(get, toks, itertools.repeat(-1)), np.int32, count=len(toks))
        keep = ids >= 0
        kept_cum = np.concatenate(([0], np.cumsum(keep, dtype=np.int64)))[np.cumsum(lens)]
        kept_lens = np.diff(kept_cum, prepend=0)
        n = int(kept_cum[-1])
        if pos + n > total:
            raise TrainingError("corpus changed between the vocabulary and encoding passes")
        words[pos : pos + n] = ids[keep]
        ends_parts.append(pos + np.cumsum(kept_lens[kept_lens > 0]))  # empty ones dropped
        pos += n
    if exact and pos != total:
        raise TrainingError("corpus changed between the vocabulary and encoding passes")
    bounds = np.concatenate(ends_parts)
    return EncodedCorpus(words=words[:pos], bounds=bounds)


def _token_bound(corpus: Corpus) -> int:
    """At most this many tokens (plain files: one per 2 bytes), else a starting size."""
    if isinstance(corpus, (str, os.PathLike)):
        files = corpus_files(corpus)
        if not any(f.suffix.lower() in (".gz", ".bz2") for f in files):
            return sum(f.stat().st_size for f in files) // 2 + 1
    return 1 << 20


class _Ids(dict):
    """token -> provisional id, numbered in order of first appearance."""

    def __missing__(self, key):
        value = self[key] = len(self)
        return value


@dataclass
class Scan:
    """One counting pass: tokens under provisional ids, numbered in first-seen order."""

    keys: list  # provisional id -> token
    counts: np.ndarray  # int64, by provisional id
    raw: int  # tokens read
    ids: np.ndarray = field(repr=False)  # int32 provisional ids, corpus order (maybe memmap)
    lens: np.ndarray = field(repr=False)  # int64 sentence lengths

    def encode(self, remap: np.ndarray) -> EncodedCorpus:
        """Rewrite the ids in place through *remap* (provisional -> final id, -1 drops).

        A block's output never overtakes its input; empty sentences are dropped.
        """
        words, raw = self.ids, self.raw
        ends = np.cumsum(self.lens)
        kept_at_end = np.zeros(len(ends), np.int64)
        pos = 0
        for start in range(0, raw, _BLOCK):
            stop = min(start + _BLOCK, raw)
            new = remap[words[start:stop]]
            keep = new >= 0
            i0, i1 = np.searchsorted(ends, (start, stop), side="right")
            kept_at_end[i0:i1] = pos + np.cumsum(keep)[ends[i0:i1] - start - 1]
            kept = new[keep]
            words[pos : pos + len(kept)] = kept
            pos += len(kept)
        kept_lens = np.diff(kept_at_end, prepend=0)
        bounds = np.concatenate(([0], np.cumsum(kept_lens[kept_lens > 0])))
        self.ids = np.zeros(0, np.int32)  # consumed
        return EncodedCorpus(words=words[:pos], bounds=bounds)

    def remap_to(self, vocab: Vocab) -> np.ndarray:
        """provisional id -> id in *vocab* (a vocabulary merged from several scans)."""
        index = {k: i for i, k in enumerate(vocab.keys)}
        get = index.get
        return np.fromiter((get(k, -1) for k in self.keys), np.int32, count=len(self.keys))


def count_corpus(corpus: Corpus, *, memmap_bytes: int = MEMMAP_BYTES) -> Scan:
    """Count *corpus* in one pass, keeping every token as a provisional id.

    Past ``memmap_bytes`` the ids go to an unlinked temporary file that is then
    memory-mapped.
    """
    ids = _Ids()
    lookup = ids.__getitem__
    counts = np.zeros(0, np.int64)
    # an upper bound of the token count for plain files: pages never touched cost no RAM
    buf = np.empty(_token_bound(corpus), np.int32)
    lens_parts: list[np.ndarray] = [np.zeros(0, np.int64)]
    spill = None  # temporary file once the ids outgrow memmap_bytes
    raw = 0
    try:
        for toks, lens in _batches(corpus):
            pids = np.fromiter(map(lookup, toks), np.int32, count=len(toks))
            raw += len(pids)
            if len(ids) > len(counts):
                counts = np.concatenate((counts, np.zeros(len(ids) - len(counts), np.int64)))
            counts += np.bincount(pids, minlength=len(counts))
            lens_parts.append(np.asarray(lens, np.int64))
            if spill is None and raw * 4 > memmap_bytes:
                spill = tempfile.TemporaryFile(prefix="vecserve-w2v-")  # noqa: SIM115
                spill.write(buf[: raw - len(pids)].tobytes())
                buf = None
            if spill is not None:
                spill.write(pids.tobytes())
                continue
            if raw > len(buf):
                grown = np.empty(max(2 * len(buf), raw), np.int32)
                grown[: raw - len(pids)] = buf[: raw - len(pids)]
                buf = grown
            buf[raw - len(pids) : raw] = pids
        if spill is not None:
            spill.flush()
            words = np.memmap(spill, np.int32, "r+", shape=(raw,)) if raw else buf
        else:
            words = buf
    finally:
        if spill is not None:
            spill.close()  # the map, if any, keeps the data
    return Scan(list(ids), counts, raw, words, np.concatenate(lens_parts))


def merge_counts(scans: list[tuple[list, np.ndarray, int]]) -> tuple[list, np.ndarray, int]:
    """Sum ``(keys, counts, raw)`` of consecutive corpus shares, in their order.

    Keys stay in first-seen order over the whole corpus (a share's new keys after the
    earlier shares' keys), so ties sort as one reader of the whole corpus sorts them.

    >>> merge_counts([(["a", "b"], np.array([2, 1]), 3), (["c", "a"], np.array([1, 1]), 2)])
    (['a', 'b', 'c'], array([3, 1, 1]), 5)
    """
    index: dict = {}
    parts: list[np.ndarray] = []
    raw = 0
    for keys, counts, n in scans:
        raw += n
        setdefault = index.setdefault
        ids = np.fromiter((setdefault(k, len(index)) for k in keys), np.int64, len(keys))
        parts.append((ids, np.asarray(counts, np.int64)))
    total = np.zeros(len(index), np.int64)
    for ids, counts in parts:
        np.add.at(total, ids, counts)
    return list(index), total, raw


def finish_vocab(keys, counts, raw, *, min_count=5, max_final_vocab=None) -> Vocab:
    """The vocabulary of merged counts (see :func:`merge_counts`)."""
    if raw == 0:
        raise TrainingError("corpus is empty: no tokens to train on")
    return _finish_vocab(keys, np.asarray(counts, np.int64), raw, min_count, max_final_vocab)


@dataclass(frozen=True)
class _Merged:
    """Rank 0's answer to a vocabulary merge: the vocabulary, or why there is none."""

    vocab: Vocab | None
    problem: str | None = None


def merge_shares(
    group,
    shard: Corpus,
    *,
    min_count: int,
    max_vocab_size: int | None,
    max_final_vocab: int | None,
) -> tuple[Vocab, Scan | None]:
    """The vocabulary of the whole corpus, and this rank's count of its *shard* (for
    :func:`encode_share`; None with ``max_vocab_size``): every rank of *group* counts its
    share, rank 0 merges the counts in rank order (ties sort
    as one reader of the whole corpus sorts them), applies the limits and sends every
    rank the same vocabulary. With ``max_vocab_size``, gensim's pruning runs on each
    share and once more on the merge."""
    if max_vocab_size is None:
        scan = count_corpus(shard)
        mine = (scan.keys, scan.counts, scan.raw)
    else:
        scan = None
        mine = count_pruned(shard, max_vocab_size)
    counted = group.gather(mine)
    merged = None
    if group.rank == 0:
        try:
            keys, counts, raw = merge_counts(counted)
            if max_vocab_size is not None:
                keys, counts = prune_counts(keys, counts, max_vocab_size)
            vocab = finish_vocab(
                keys, counts, raw, min_count=min_count, max_final_vocab=max_final_vocab
            )
            vocab.order = None
            merged = _Merged(vocab)
        except TrainingError as exc:
            merged = _Merged(None, str(exc))
    merged = group.bcast(merged)
    if merged.problem is not None:
        raise TrainingError(merged.problem, collective=True)
    return merged.vocab, scan


def encode_share(shard: Corpus, scan: Scan | None, vocab: Vocab) -> EncodedCorpus:
    """A rank's *shard* encoded with the merged *vocab*: from its count (*scan*) if it
    kept one, else in a second pass over the shard."""
    if scan is not None:
        return scan.encode(scan.remap_to(vocab))
    return encode_corpus(shard, vocab, exact=False)


def scan_corpus(
    corpus: Corpus,
    *,
    min_count: int = 5,
    max_final_vocab: int | None = None,
    memmap_bytes: int = MEMMAP_BYTES,
) -> tuple[Vocab, EncodedCorpus]:
    """Count and encode in ONE pass over *corpus* (so a one-shot iterator works too).

    Tokens get provisional ids in order of first appearance while they are counted; once
    the vocabulary is known, a lookup table turns them into final ids (or drops them) in
    place, block by block. Same result as :func:`build_vocab` then
    :func:`encode_corpus` (without ``max_vocab_size`` pruning).

    >>> v, enc = scan_corpus(iter([["a", "b", "a"], ["c"], ["a", "c"]]), min_count=2)
    >>> v.words, enc.words.tolist(), enc.bounds.tolist()
    (['a', 'c'], [0, 0, 1, 0, 1], [0, 2, 3, 5])
    """
    scan = count_corpus(corpus, memmap_bytes=memmap_bytes)
    vocab = finish_vocab(
        scan.keys, scan.counts, scan.raw, min_count=min_count, max_final_vocab=max_final_vocab
    )
    remap = np.full(len(scan.keys), -1, np.int32)
    remap[vocab.order] = np.arange(len(vocab), dtype=np.int32)
    return vocab, scan.encode(remap)
