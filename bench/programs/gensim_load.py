"""Load a word2vec binary file with gensim, the reference every worker would pay:
``gensim_load.py MODEL_BIN``; prints the number of vectors loaded."""

import sys

from gensim.models import KeyedVectors

kv = KeyedVectors.load_word2vec_format(sys.argv[1], binary=True)
print(len(kv))
