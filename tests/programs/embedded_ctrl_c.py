"""Attach to the embedded server of DATA_DIR, then Ctrl-C this process's whole group:
``embedded_ctrl_c.py DATA_DIR`` (run it in a session of its own); prints ``up`` first."""

import os
import signal
import sys

from vecserve.embedded import EmbeddedServer

server = EmbeddedServer(sys.argv[1]).acquire()  # held until the process ends
print("up", flush=True)
os.killpg(0, signal.SIGINT)
