"""First import of the trial server (multiprocessing's forkserver).

It shares the terminal's process group with the sweep, so a Ctrl-C there would interrupt it
while it imports torch and print a traceback. The sweep decides what happens on Ctrl-C; the
server ignores it, as it does anyway once it has started serving.

When the sweep ends, the server is told by its pipe closing and exits; tearing down the
interpreter with torch loaded takes about a second, and the server holds the terminal's output
open meanwhile. It has nothing to flush or clean up (each trial is a process of its own, which
leaves by os._exit), so it leaves at once.
"""

import atexit
import os
import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)
atexit.register(os._exit, 0)
