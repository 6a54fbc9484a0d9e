#!/bin/bash
# Resume quality: an uninterrupted run against one killed after its epoch-2 checkpoint
# and resumed (2 ranks x 1 thread, wiki100m, 5 epochs); prints both scores.
# Usage (vecserve[mpi] installed in the active environment; SYNC_OPTS: extra options):
#   flock /tmp/vecserve-bench.lock bash bench/resume_distributed.sh [corpus text file]
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
C=${1:-/tmp/vecserve-bench-train/wiki100m}
A="train $C --vector-size 100 --window 5 --negative 5 --sample 1e-4 --min-count 5 --epochs 5 -j 1 $SYNC_OPTS"
rm -rf /tmp/rb && mkdir -p /tmp/rb
mpiexec -n 2 vecserve $A --save /tmp/rb/full.bin 2>/tmp/rb/full.err
mpiexec -n 2 vecserve $A --checkpoint-dir /tmp/rb/ckpt --save /tmp/rb/never.bin 2>/tmp/rb/killed.err &
job=$!
while ! grep -q "checkpoint: 2/5" /tmp/rb/killed.err 2>/dev/null; do sleep 0.5; done
kill -9 $(pgrep -P $job) $job; wait  # the whole job: its ranks and mpiexec
mpiexec -n 2 vecserve $A --checkpoint-dir /tmp/rb/ckpt --resume --save /tmp/rb/resumed.bin 2>/tmp/rb/resumed.err
python - <<'PY'
import sys; sys.path.insert(0, "bench")
from bench_train import evaluate
from gensim.models import KeyedVectors
for n in ("full", "resumed"):
    kv = KeyedVectors.load_word2vec_format(f"/tmp/rb/{n}.bin", binary=True)
    a, w = evaluate(kv)
    print(f"{n}: analogy {100*a:.2f} WS-353 {w:.3f}")
PY
cmp -s /tmp/rb/full.bin /tmp/rb/resumed.bin && echo "bit-identical vectors"
grep -h "resuming\|Error" /tmp/rb/*.err | head
