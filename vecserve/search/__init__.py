"""Whole-matrix search over one model generation: the snapshot (:mod:`.snapshot`), its
shared vocabulary (:mod:`.vocab`), exact top n and batches (:mod:`.exact`), the inverted
file and its C scan (:mod:`.ivf`), and the approximate-index manager (:mod:`.ann`).
Knows nothing of HTTP."""
