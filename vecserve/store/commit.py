"""A load's commit: the generation proven whole, then made the model's live one in one
``HSET`` (:class:`Committing`, the commit half of :class:`~.session.LoadSession`)."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import replace

import numpy as np

from ..errors import LoadIncomplete
from .generations import collect, retire
from .keys import EVENTS, LOADS, MODELS, counts_key, vocab_hashes_key, vocab_key, vocab_sizes_key
from .records import ModelInfo

log = logging.getLogger("vecserve.load")

__all__ = ["Committing"]


class Committing:
    """:meth:`commit`, on a :class:`~.session.LoadSession`'s state, store and lease."""

    def commit(
        self,
        *,
        sha256: str = "",
        duplicates: int = 0,
        words: int | None = None,
        progress=None,
    ) -> ModelInfo:
        """Verify the generation is whole, then flip the registry to it (one HSET) and
        retire the previous one: it is deleted unless a pin holds it or it is kept for
        rollback (:mod:`.generations`).

        Every row's key is proven present first: by the server's INFO where this process
        wrote the whole generation and nothing on the server could have removed a key
        since its first write (:class:`~.facts.Witness`; a sample of the keys is asked
        too), else key by key (`Store.check_rows`: a multi-key EXISTS per ~100k keys, per
        hash tag on a cluster). The vocabulary's word hashes, for the readers' damage
        detection (``vecserve:vocabh:P``), come from the writes or that pass. Keys
        missing (evicted, lost in a failover) raise :class:`LoadIncomplete` and nothing
        is committed.
        ``progress(done, total)`` is called as the check goes.

        The vocabulary is checked to be the source's whole vocabulary: ``words`` (how many
        distinct words the source holds, when the caller knows) equals the words written
        (else :class:`LoadIncomplete`), and the stored list holds exactly the blobs and as
        many distinct words as were written (else :class:`StoreUnavailable`: the server
        lost or repeated a write, and a resume rewrites the load).
        """
        s = self.state
        store = self.store
        info = self._as_info(
            count=s.written,
            sha256=sha256,
            created=time.time(),
            load_seconds=round(time.time() - s.started, 3),
            duplicates=duplicates,
        )
        self._check_vocabulary(words)
        # the replicas first have every row, so a failover after the check loses none
        slots = [
            vocab_key(s.prefix),
            vocab_sizes_key(s.prefix),
            counts_key(s.prefix),
            *(str(b) for b in range(info.buckets)),
        ]
        _warn_late(s.name, store.wait_for_replicas(slots), "the new generation")
        hashes = self._prove_rows(info, progress)
        info = replace(info, load_seconds=round(time.time() - s.started, 3), word_hashes=True)
        self._flip(info, hashes)
        _warn_late(s.name, store.wait_for_replicas([MODELS]), "the commit")
        self.committed = info
        collect(store, s.name, keep=self.keep, lease=self.lease)
        self.lease.release()
        if store.after_commit is not None:
            store.after_commit()
        return info

    def _check_vocabulary(self, words: int | None) -> None:
        """LoadIncomplete unless the load wrote the source's ``words``; StoreUnavailable
        unless the stored vocabulary holds exactly the blobs and words written."""
        s = self.state
        store = self.store
        if words is not None and words != s.written:
            raise LoadIncomplete(
                f"the load of {s.name!r} wrote {s.written:,} words of the {words:,} its "
                "source holds; it was not committed. Load it again with --restart"
            )
        with store.errors(f"committing {s.name!r}"):
            blobs = store.client.llen(vocab_key(s.prefix))
            sizes = store.client.get(vocab_sizes_key(s.prefix)) or b""
        n = int(np.frombuffer(sizes[: len(sizes) // 4 * 4], dtype="<u4").sum())
        if blobs != s.chunks or n != s.written:
            raise self._lost(
                f"its vocabulary has {n:,} words in {blobs:,} blobs where the load wrote "
                f"{s.written:,} in {s.chunks:,}"
            )

    def _prove_rows(self, info: ModelInfo, progress) -> np.ndarray:
        """The vocabulary's sorted word hashes, once every row's key is proven present
        (LoadIncomplete if one is missing)."""
        s = self.state
        store = self.store
        started = time.perf_counter()
        check, why = self.witness.proof(info)
        if check is None:
            check = store.check_rows(info, hashes=True, progress=progress)
            how = f"every key asked ({why})"
        else:
            how = "the server's INFO shows nothing removed a key since the first write"
        log.debug(  # the proof, for -v: a clean commit says only that it committed
            "%s: %s rows present, %s; %.2f s",
            s.name,
            f"{check.checked - check.missing:,}",
            how,
            time.perf_counter() - started,
        )
        if check.missing or check.unlisted:  # (rows a lost vocabulary names no more)
            words = ", ".join(repr(w) for w in check.words[:3])
            raise LoadIncomplete(
                f"the new generation of {s.name!r} is missing "
                f"{check.missing + check.unlisted:,} of its "
                f"{check.checked + check.unlisted:,} rows ({words or 'n-gram rows'}...) "
                "although the server "
                "acknowledged them (a policy that evicts keys? a failover?); it was not "
                f"committed. Fix the server, then load again with --resume"
            )
        hashes = check.hashes
        assert hashes is not None
        if len(hashes) != s.written:
            raise self._lost(
                f"its vocabulary holds {len(hashes):,} distinct words where the load wrote "
                f"{s.written:,}"
            )
        return hashes

    def _flip(self, info: ModelInfo, hashes: np.ndarray) -> None:
        """Store the word hashes, retire the live generation, make ``info`` the live one."""
        s = self.state
        store = self.store
        with store.errors(f"committing {s.name!r}"):
            # which words are in the vocabulary: damage is told from an unknown word by it
            store.client.set(vocab_hashes_key(s.prefix), hashes.astype("<u8").tobytes())
            raw_old = store.client.hget(MODELS, s.name)
            old = ModelInfo.from_json(raw_old) if raw_old is not None else None
            if old is not None:
                retire(store, old)
            store.client.hset(MODELS, s.name, info.to_json())  # the flip
            store.client.hdel(LOADS, s.name)
            store.client.publish(
                EVENTS,
                json.dumps({"event": "commit", "model": s.name, "generation": s.generation}),
            )


def _warn_late(name: str, late: list[str], what: str) -> None:
    if late:
        log.warning(
            "replicas of %s have not acknowledged %s of %r yet: a failover now could lose "
            "part of it (`vecserve models check %s` tells)",
            ", ".join(late),
            what,
            name,
            name,
        )
