"""Text in, vectors out: tokenizers, phrases and pooling on the reader core.

- :mod:`.spec`: :class:`TextSpec`, how a model cuts and pools text (in its registry entry);
- :mod:`.tokenize`: :class:`StaticTokenizer` (a `tokenizers` JSON: static embedding
  models) and :class:`WordTokenizer` (pattern, case, phrases: word models), ``fit_words``;
- :mod:`.pool`: the mean of a batch's rows, one sparse product;
- :mod:`.embed`: ``embed_steps``, the one text read (steps) every client drives;
- ``embed``: the clients' method (``kv.embed``), a Call of :mod:`vecserve.keyedvectors`.

Nothing here builds a key name or talks to Redis itself: rows come from
:meth:`vecserve.reader.Reader.lookup_steps`, the text blob from the store.
"""

from .spec import TextSpec

__all__ = ["TextSpec"]
