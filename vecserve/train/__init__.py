"""vecserve's own word2vec trainer: Cython/BLAS Hogwild kernels, HogBatch for skip-gram;
fastText's subword model (:class:`FastText`) on the same machinery.

>>> from vecserve.train import Word2Vec
>>> model = Word2Vec([["a", "b", "c"]] * 20, vector_size=8, min_count=1, workers=1)
>>> len(model.wv)
3
"""

from .model import Word2Vec
from .subword import FastText

__all__ = ["FastText", "Word2Vec"]
