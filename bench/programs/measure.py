"""Run a command and report its wall time and peak resident set:
``measure.py COMMAND [ARGS...]``; prints ``WALL_S MAXRSS_KB EXIT_CODE`` as the last line
of stderr (the command's own output passes through).

A benchmark runs its commands through this small process because a child forked straight
from the (large) benchmark process would inherit its resident-set high-water mark.
"""

import resource
import subprocess
import sys
import time

t0 = time.perf_counter()
code = subprocess.call(sys.argv[1:])
wall = time.perf_counter() - t0
print(wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, code, file=sys.stderr)
