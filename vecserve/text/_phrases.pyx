# cython: language_level=3
"""Greedy longest-match phrases over a batch's words in one compiled pass: the inner loop
of :class:`vecserve.text.tokenize.WordTokenizer`.

The index it walks is the tokenizer's: ``follow`` maps each word a phrase starts with to
the words that may follow it there, each to the two-word phrase itself (its ``str``) where
no longer phrase goes on from the pair, else to flags (:data:`PHRASE`: the pair is a
phrase; :data:`GROWS`: a longer one goes on from it); ``longer`` maps each phrase of 3+
words and each proper prefix of 3+ words of one to the same flags. Per word one lookup in
the first-word index, a second only where a phrase may start, both in C; a string is built
only where a pair grows. The same loop in Python cost 1.5-2.5 us a short sentence more
than the plain cut; here the matching is a small part of the cut.
"""

from cpython.dict cimport PyDict_GetItem
from cpython.ref cimport PyObject

#: a pair's (or a longer prefix's) flags: it is a phrase; a longer phrase goes on from it
PHRASE = 1
GROWS = 2

cdef enum:
    _PHRASE = 1
    _GROWS = 2


def join_phrases(list words not None, dict follow not None, dict longer not None,
                 str joiner not None):
    """``words`` with the vocabulary's phrases joined, greedy longest match from the left.

    ``words`` may hold ``None`` between texts: it is no word, so no phrase crosses it, and
    it is kept. Where nothing is joined the answer is ``words`` itself.

    >>> join_phrases(["New", "York", None, "New", "York", "Times", "x"],
    ...              {"New": {"York": PHRASE | GROWS}}, {"New_York_Times": PHRASE}, "_")
    ['New_York', None, 'New_York_Times', 'x']
    """
    cdef Py_ssize_t n = len(words), i = 0, at = 0, end, k
    cdef PyObject *nexts
    cdef PyObject *entry
    cdef PyObject *more
    cdef long flags
    cdef list out = None
    cdef object token, cand, w
    while i + 1 < n:
        nexts = PyDict_GetItem(follow, words[i])
        if nexts is NULL:
            i += 1
            continue
        entry = PyDict_GetItem(<object>nexts, words[i + 1])  # None (a text's end): absent
        if entry is NULL:
            i += 1
            continue
        if type(<object>entry) is str:  # a two-word phrase no longer one grows from
            token = <object>entry
            end = i + 2
        else:
            flags = <object>entry
            end = i + 2 if flags & _PHRASE else 0
            if flags & _GROWS:
                cand = words[i] + joiner + words[i + 1]
                k = i + 2
                while k < n:
                    w = words[k]
                    if w is None:
                        break
                    cand = cand + joiner + w
                    k += 1
                    more = PyDict_GetItem(longer, cand)
                    if more is NULL:
                        break
                    flags = <object>more
                    if flags & _PHRASE:
                        end = k
                    if not flags & _GROWS:
                        break
            if not end:
                i += 1
                continue
            token = joiner.join(words[i:end])
        if out is None:
            out = []
        out.extend(words[at:i])
        out.append(token)
        at = i = end
    if out is None:
        return words
    out.extend(words[at:])
    return out
