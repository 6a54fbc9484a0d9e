"""Process liveness: the one check every part of vecserve uses.

A process that has exited but not been reaped yet (a zombie, as a daemonised server or a
killed loader is until its parent waits for it) counts as dead: it will never answer,
refresh a lease or publish a metric again.

>>> import os
>>> pid_alive(os.getpid())
True
"""

from __future__ import annotations

import os

__all__ = ["pid_alive"]


def pid_alive(pid: int) -> bool:
    """True if process ``pid`` exists on this host and is not a zombie.

    A process we may not signal (another user's) exists, so it is alive.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):  # no /proc (macOS), or it exited just now
        return True
