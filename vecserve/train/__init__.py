"""vecserve's own word2vec trainer: Cython/BLAS Hogwild kernels, HogBatch for skip-gram.

>>> from vecserve.train import Word2Vec
>>> model = Word2Vec([["a", "b", "c"]] * 20, vector_size=8, min_count=1, workers=1)
>>> len(model.wv)
3
"""

from .model import Word2Vec

__all__ = ["Word2Vec"]
