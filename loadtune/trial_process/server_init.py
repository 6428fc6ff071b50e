"""First import of the trial server (multiprocessing's forkserver): it shares the terminal's
process group with the sweep, so a Ctrl-C there would interrupt it while it imports torch
and print a traceback. The sweep decides what happens on Ctrl-C; the server ignores it, as
it does anyway once it has started serving."""

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)
