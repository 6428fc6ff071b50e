"""First import of the trial server (multiprocessing's forkserver).

It shares the terminal's process group with the sweep, so a Ctrl-C there would interrupt it
while it imports torch and print a traceback. The sweep decides what happens on Ctrl-C; the
server ignores it, as it does anyway once it has started serving.

When the sweep ends, the server is told by its pipe closing and exits; tearing down the
interpreter with torch loaded takes about a second, and the server holds the terminal's output
open meanwhile. It has nothing to flush or clean up (each trial is a process of its own, which
leaves by os._exit), so it leaves at once.

Multiprocessing runs the parent's main module again in each new process (as `__mp_main__`)
unless that process's `__main__` already has its name or path. The sweep names its main
module in the environment when it starts the server, and the server's `__main__` takes that
name and path: the trials forked from here then skip it (launch._start_server says why). It
takes the sweep's sys.path too, so that it can import a factory module given as a file.
"""

import atexit
import importlib.machinery
import os
import signal
import sys

from loadtune.trial_process.channel import MAIN_NAME_VAR, MAIN_PATH_VAR, SYS_PATH_VAR

signal.signal(signal.SIGINT, signal.SIG_IGN)
atexit.register(os._exit, 0)


def _stand_in_for_the_sweeps_main() -> None:
    """Give this server's __main__ the name and path of the sweep's main module."""
    main = sys.modules.get("__main__")
    if main is None:
        return
    name, path = os.environ.pop(MAIN_NAME_VAR, None), os.environ.pop(MAIN_PATH_VAR, None)  # not the trials' business
    if name:
        main.__spec__ = importlib.machinery.ModuleSpec(name, None)
    if path:
        main.__file__ = path


def _take_the_sweeps_path() -> None:
    """The sweep's sys.path, as each trial forked from here gets it, before the factory modules
    the server imports next: one given as a file lies in a folder only the sweep's path has."""
    path = os.environ.pop(SYS_PATH_VAR, None)
    if path:
        sys.path[:] = path.split(os.pathsep)


_stand_in_for_the_sweeps_main()
_take_the_sweeps_path()
