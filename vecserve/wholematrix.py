"""The calls of :class:`~vecserve.keyedvectors.RedisKeyedVectors` that need the whole matrix.

``most_similar`` (all argument forms), ``most_similar_cosmul`` and ``similar_by_*`` go to
the vecserve HTTP service when ``similarity_url`` is set (request/response JSON in
:mod:`vecserve.search.snapshot`); otherwise, and always for ``closer_than``, ``rank`` and the
evaluations, they run on the local memory-mapped
:class:`~vecserve.search.snapshot.SimilarityIndex` of the current generation, which gives
gensim's exact results. Kept apart from the lookups so each module stays one concept.

>>> kv.most_similar(positive=["king", "woman"], negative=["man"], topn=1)  # doctest: +SKIP
[('queen', 0.7118192911148071)]
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
import warnings
from numbers import Integral

import numpy as np

from .errors import (
    ModelNotFound,
    SimilarityServiceError,
    TextRejected,
    TokenNotFound,
    VecserveError,
)
from .search.planner import QUERY_ERRORS
from .search.snapshot import (
    SimilarityIndex,
    ensure_list,
    mean_vector,
    split_weights,
)
from .search.wire import encode_items

__all__ = ["WholeMatrixCalls"]

REAL = np.float32


class WholeMatrixCalls:
    """Mixin: needs ``name``, ``similarity_url``, ``_api_key``, ``_index()`` and
    ``_vectors_of()``."""

    def snapshot(self) -> SimilarityIndex:
        """The local memory-mapped snapshot of the current generation (built if needed)."""
        return self._index()

    def _remote(self, positive, negative, topn, restrict_vocab, cosmul: bool):
        if cosmul:  # gensim hashes every non-vector item first: TypeError for (vector, w)
            for item in ensure_list(positive) + ensure_list(negative):
                if not isinstance(item, np.ndarray):
                    hash(item)
        body = {
            "model": self.name,
            "positive": encode_items(positive),
            "negative": encode_items(negative),
            "topn": topn,
            "restrict_vocab": restrict_vocab,
            "cosmul": cosmul,
        }
        return _answer(self._post("/most_similar", body, cosmul=cosmul))

    def _post(self, path: str, body: dict, *, cosmul: bool = False) -> dict:
        """POST ``body`` as JSON to the similarity service's ``path``; its JSON reply."""
        url = self.similarity_url.rstrip("/") + path  # type: ignore[union-attr]
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise self._http_error(exc, url, cosmul=cosmul) from None
        except (urllib.error.URLError, OSError) as exc:
            raise SimilarityServiceError(f"similarity service {url} unreachable: {exc}") from exc

    def _http_error(self, exc: urllib.error.HTTPError, url: str, *, cosmul: bool) -> Exception:
        """The exception gensim raises for the query the service refused.

        404 TokenNotFound -> :class:`TokenNotFound` with gensim's message for the call
        (``most_similar_cosmul`` looks words up, ``most_similar`` averages them); 404
        ModelNotFound -> :class:`ModelNotFound`; any other 4xx (a query the engine rejects,
        400, or a malformed one, 422) -> ``ValueError`` as gensim's arithmetic raises;
        5xx -> :class:`SimilarityServiceError`. A 4xx is the caller's, never "unavailable".
        """
        try:
            err = json.loads(exc.read())
        except ValueError:
            err = {}
        if not isinstance(err, dict):
            err = {}
        if exc.code in (401, 403):  # not the query's fault: the key (api_key=) is wrong
            detail = str(err.get("detail", exc))
            return SimilarityServiceError(
                f"similarity service {url} refused us (HTTP {exc.code}): {detail}; "
                "pass api_key= or set VECSERVE_API_KEY",
                status=exc.code,
            )
        if 400 <= exc.code < 500:
            return self._error_of(err, cosmul=cosmul, default=str(exc))
        detail = str(err.get("detail", exc))
        return SimilarityServiceError(
            f"similarity service {url}: HTTP {exc.code}: {detail}", status=exc.code
        )

    def _error_of(self, err: dict, *, cosmul: bool, default: str = "") -> Exception:
        """The exception gensim raises for a query the service refused with JSON ``err``
        (a single call's body or a batch's slot): TokenNotFound, ModelNotFound, or
        ``ValueError`` for any other 4xx."""
        detail = str(err.get("detail", default))
        kind = err.get("error", "")
        if kind == "TokenNotFound":
            token = err.get("token")
            if token is None:
                return KeyError(detail)
            return TokenNotFound(token, self.name, lookup=cosmul)
        if kind == "ModelNotFound":
            return ModelNotFound(self.name)
        return ValueError(detail)

    def _subword_terms(self, positive, negative):
        """Hook: a fastText model's out-of-vocabulary words as vectors (identity here)."""
        return positive, negative

    def _text_terms(self, positive, negative):
        """Hook: each :class:`~vecserve.text.query.Text` as its vector (identity here)."""
        return positive, negative

    def most_similar(
        self,
        positive=None,
        negative=None,
        topn=10,
        clip_start=0,
        clip_end=None,
        restrict_vocab=None,
        indexer=None,
    ):
        """gensim's ``most_similar`` (all argument forms); see the module docstring for where
        it is computed. ``[(key, similarity), ...]``, or an array when ``topn=None``.
        ``vecserve.Text("...")`` goes where a vector does (a plain str is a key)."""
        if isinstance(topn, int) and topn < 1:
            return []
        positive, negative = self._text_terms(positive, negative)
        positive, negative = self._subword_terms(positive, negative)
        if indexer is not None and isinstance(topn, int):
            keys, weight = split_weights(positive, negative)
            normed = self._vectors_of(keys, norm=True)
            return indexer.most_similar(mean_vector(keys, weight, normed, self.vector_size), topn)
        if self.similarity_url and not clip_start and clip_end is None:
            return self._remote(positive, negative, topn, restrict_vocab, False)
        return self._index().most_similar(
            positive, negative, topn, clip_start, clip_end, restrict_vocab
        )

    def most_similar_batch(
        self, queries, topn=10, restrict_vocab=None, *, return_exceptions: bool = False
    ) -> list:
        """Many ``most_similar`` queries in one call: a list of their answers, each the one
        :meth:`most_similar` gives (words, order and scores).

        ``queries``: a list (or a 2-D array of vectors) whose items are each a key, a
        vector, or a dict of :meth:`most_similar`'s arguments (``positive``,
        ``negative``, ``topn``, ``restrict_vocab``; ``cosmul=True`` for
        :meth:`most_similar_cosmul`); ``topn`` and ``restrict_vocab`` are the defaults
        of the queries that do not say. Answered by one blocked matrix multiply for all
        of them (the local snapshot) or one ``POST /most_similar/batch`` (the service).
        Named apart from :meth:`most_similar` because there a list is already one query
        (``positive=["king", "woman"]`` averages the two words).

        A query that fails on its own raises what :meth:`most_similar` raises for it
        (``KeyError`` for an unknown word, ``ValueError`` for an empty query), with a note
        naming its position in the batch; the first such query in order is raised. With
        ``return_exceptions=True`` (as in :func:`asyncio.gather`) that error takes the
        query's place in the list instead, and every other query is answered. Errors that
        are not one query's (the store, the service, a malformed call) always raise.

        >>> kv.most_similar_batch(["king", {"positive": ["paris"], "topn": 2}])  # doctest: +SKIP
        [[('queen', 0.71), ...], [('france', 0.68), ('london', 0.66)]]
        >>> kv.most_similar_batch(["king", "nope"], return_exceptions=True)     # doctest: +SKIP
        [[('queen', 0.71), ...], KeyError("Key 'nope' not present in vocabulary")]
        """
        asked = [_query_dict(q, topn, restrict_vocab) for q in queries]
        rejected: dict[int, Exception] = {}  # a query whose Text has no vector: its error
        for i, q in enumerate(asked):
            try:
                q["positive"], q["negative"] = self._text_terms(q["positive"], q["negative"])
            except TextRejected as exc:
                rejected[i] = exc
                continue
            q["positive"], q["negative"] = self._subword_terms(q["positive"], q["negative"])
        if not asked:
            return []
        todo = [q for i, q in enumerate(asked) if i not in rejected]
        if not todo:
            answers = []
        elif self.similarity_url:
            answers = self._remote_batch(todo)
        else:
            answers = _local_batch(self._index(), todo)
        if rejected:
            rest = iter(answers)
            answers = [rejected[i] if i in rejected else next(rest) for i in range(len(asked))]
        if not return_exceptions:
            for i, a in enumerate(answers):
                if isinstance(a, Exception):
                    a.add_note(f"(query {i} of the batch of {len(answers)})")
                    raise a
        return answers

    def _remote_batch(self, asked: list[dict]) -> list:
        """``POST /most_similar/batch``: each query's answer, or the exception its error
        (the reply's ``errors`` slot) maps to, as :meth:`_http_error` maps a single call's."""
        body = {"model": self.name, "queries": [_wire(q) for q in asked]}
        out = self._post("/most_similar/batch", body, cosmul=any(q["cosmul"] for q in asked))
        errors = out.get("errors") or [None] * len(asked)
        answers: list = []
        for q, r, err in zip(asked, out["results"], errors, strict=True):
            if err is not None:
                answers.append(self._error_of(err, cosmul=q["cosmul"]))
            elif q["topn"] is None:
                answers.append(_scores(r))
            else:
                answers.append(_pairs(r))
        return answers

    def most_similar_cosmul(self, positive=None, negative=None, topn=10, restrict_vocab=None):
        """gensim's 3CosMul (``restrict_vocab`` ignored, as in gensim 4.4)."""
        if isinstance(topn, int) and topn < 1:
            return []
        positive, negative = self._text_terms(positive, negative)
        if self.similarity_url:
            return self._remote(positive, negative, topn, restrict_vocab, True)
        return self._index().most_similar_cosmul(positive, negative, topn, restrict_vocab)

    def similar_by_key(self, key, topn=10, restrict_vocab=None):
        return self.most_similar(positive=[key], topn=topn, restrict_vocab=restrict_vocab)

    similar_by_word = similar_by_key

    def similar_by_vector(self, vector, topn=10, restrict_vocab=None):
        return self.most_similar(positive=[vector], topn=topn, restrict_vocab=restrict_vocab)

    def closer_than(self, key1, key2) -> list[str]:
        return self._index().closer_than(key1, key2)

    def rank(self, key1, key2) -> int:
        return self._index().rank(key1, key2)

    def relative_cosine_similarity(self, wa, wb, topn=10) -> float:
        """gensim's relative cosine similarity: ``similarity(wa, wb)`` over the summed
        similarities of ``wa``'s ``topn`` nearest words (Leeuwenberg et al., 2016)."""
        sims = self.similar_by_word(wa, topn)
        if not sims:
            raise ValueError(
                "Cannot calculate relative cosine similarity without any similar words."
            )
        return float(self.similarity(wa, wb)) / sum(sim for _, sim in sims)

    def words_closer_than(self, word1, word2) -> list[str]:
        """gensim's older name of :meth:`closer_than` (deprecated there too)."""
        warnings.warn(
            "Call to deprecated `words_closer_than` (Use closer_than instead).",
            DeprecationWarning,
            2,
        )
        return self.closer_than(word1, word2)

    def get_normed_vectors(self) -> np.ndarray:
        """Every vector at unit length, in model order: the whole matrix, in memory."""
        index = self._index()
        return index.vectors / index.norms[..., np.newaxis]  # gensim's arithmetic

    @property
    def vectors(self) -> np.ndarray:
        """The whole matrix, read-only: the memory-mapped snapshot's (built if needed)."""
        return self._index().vectors

    @property
    def norms(self) -> np.ndarray:
        """Every vector's L2 norm, from the snapshot."""
        return self._index().norms

    @staticmethod
    def log_accuracy(section):
        from gensim.models import KeyedVectors

        return KeyedVectors.log_accuracy(section)

    @staticmethod
    def log_evaluate_word_pairs(pearson, spearman, oov, pairs):
        from gensim.models import KeyedVectors

        return KeyedVectors.log_evaluate_word_pairs(pearson, spearman, oov, pairs)

    def similarity_unseen_docs(self, *args, **kwargs):
        raise NotImplementedError("Call similarity_unseen_docs on a Doc2Vec model instead.")

    def evaluate_word_analogies(
        self,
        analogies,
        restrict_vocab=300000,
        case_insensitive=True,
        dummy4unknown=False,
        similarity_function="most_similar",
    ):
        """gensim's own evaluation on a zero-copy view of the first ``restrict_vocab`` rows."""
        view = self._index().as_keyedvectors(limit=restrict_vocab)
        return view.evaluate_word_analogies(
            analogies, restrict_vocab, case_insensitive, dummy4unknown, similarity_function
        )

    def evaluate_word_pairs(
        self,
        pairs,
        delimiter="\t",
        encoding="utf8",
        restrict_vocab=300000,
        case_insensitive=True,
        dummy4unknown=False,
    ):
        """gensim's own evaluation on a zero-copy view of the first ``restrict_vocab`` rows."""
        view = self._index().as_keyedvectors(limit=restrict_vocab)
        return view.evaluate_word_pairs(
            pairs, delimiter, encoding, restrict_vocab, case_insensitive, dummy4unknown
        )


def _answer(out: dict):
    """A ``/most_similar`` reply as gensim returns it: pairs, or the similarity array."""
    if "similarities" in out:
        return _scores(out["similarities"])
    return _pairs(out["results"])


def _scores(values: list) -> np.ndarray:
    """The service's similarities as gensim's array (its null: NaN, JSON has none)."""
    return np.array([math.nan if v is None else v for v in values], dtype=REAL)


def _pairs(results: list) -> list:
    """The service's ``[word, cosine]`` pairs as gensim's tuples (null: NaN)."""
    return [(k, math.nan if s is None else float(s)) for k, s in results]


def _is_query_error(exc: Exception) -> bool:
    """An error of one query's own arguments, as :meth:`most_similar` raises it: a
    ``KeyError`` (an unknown word) or ``ValueError`` (an empty query, a vector of the
    wrong size); not vecserve's errors of the store, the model or the snapshot."""
    if isinstance(exc, QUERY_ERRORS):  # vecserve's own: a word, an empty query, an item
        return True
    return isinstance(exc, (KeyError, ValueError)) and not isinstance(exc, VecserveError)


def _local_batch(index: SimilarityIndex, asked: list[dict]) -> list:
    """Each query's answer from the snapshot, or its own error: the whole batch in one
    call when every query is good (the common case); else each query checked (a plain
    one's mean computed, any other answered alone), and the good ones answered together."""
    try:
        return index.most_similar_batch(asked)
    except Exception as exc:
        if not _is_query_error(exc):
            raise
    out: list = [None] * len(asked)
    together = []
    for i, q in enumerate(asked):
        try:
            if _plain(q):
                index.query_vector(q["positive"], q["negative"])  # its words, its mean
                together.append(i)
            else:
                out[i] = index.most_similar_batch([q])[0]
        except Exception as exc:
            if not _is_query_error(exc):
                raise
            out[i] = exc
    try:
        answers = index.most_similar_batch([asked[i] for i in together])
    except Exception as exc:  # a check the mean did not make: each one alone
        if not _is_query_error(exc):
            raise
        answers = []
        for i in together:
            try:
                answers.append(index.most_similar_batch([asked[i]])[0])
            except Exception as one:
                if not _is_query_error(one):
                    raise
                answers.append(one)
    for i, a in zip(together, answers, strict=True):
        out[i] = a
    return out


def _plain(q: dict) -> bool:
    """A query the snapshot answers in its blocked matrix multiply (top-n, no cosmul, no
    restrict_vocab)."""
    topn = q["topn"]
    plain = isinstance(topn, Integral) and topn >= 1
    return plain and not q["cosmul"] and not q["restrict_vocab"]


def _query_dict(query, topn, restrict_vocab) -> dict:
    """One item of :meth:`WholeMatrixCalls.most_similar_batch` as most_similar's arguments."""
    if isinstance(query, dict):
        unknown = set(query) - {"positive", "negative", "topn", "restrict_vocab", "cosmul"}
        if unknown:
            raise TypeError(f"most_similar_batch: unknown query argument(s) {sorted(unknown)}")
        q = dict(query)
    else:
        q = {"positive": [query]}
    q.setdefault("positive", None)
    q.setdefault("negative", None)
    q.setdefault("topn", topn)
    q.setdefault("restrict_vocab", restrict_vocab)
    q.setdefault("cosmul", False)
    return q


def _wire(q: dict) -> dict:
    """A query dict as ``POST /most_similar/batch`` takes it."""
    return dict(q, positive=encode_items(q["positive"]), negative=encode_items(q["negative"]))
