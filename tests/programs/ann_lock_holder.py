"""Hold an ANN index's build lock as another builder would, with its progress file:
``ann_lock_holder.py LOCK PROGRESS``; prints ``held``, then sleeps until killed."""

import fcntl
import json
import os
import sys
import time

lock, progress = sys.argv[1], sys.argv[2]
fd = os.open(lock, os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
with open(progress, "w") as f:
    json.dump(
        {
            "share": 0.25,
            "done": 5000,
            "total": 20000,
            "vectors_per_s": 1000.0,
            "eta_s": 15.0,
            "pid": os.getpid(),
        },
        f,
    )
print("held", flush=True)
time.sleep(120)
