"""`loadtune watch SCRIPT [ARGS]...`: an unchanged training script run as `python SCRIPT ARGS` runs
it (in this process, as __main__, with its argv and its folder first on sys.path), every
DataLoader it iterates watched. Its output and exit status pass through; a script that raises
leaves the rows measured so far (and Python's traceback and exit status); an interrupt ends the
process by the same signal, as Python's own would."""

from __future__ import annotations

import os
import runpy
import signal
import sys
import traceback
from pathlib import Path

from loadtune.errors import ConfigError
from loadtune.training_process.hook import stop_watching, watch_every_loader
from loadtune.training_process.run import run_for


def run_script(script: str, args: list[str], *, out: str | None, every_s: float, module: bool = False) -> int:
    """Run the script (or, with `module`, the module, as `python -m` does) watched; its exit status."""
    if not every_s > 0:
        raise ConfigError(f"--every must be a number of seconds above 0, got {every_s:g}")
    if not module and not Path(script).is_file():
        raise ConfigError(f"{script}: no such script")
    name = script.rsplit(".", 1)[-1] if module else Path(script).stem
    run = run_for(out, every_s, name, script=script)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [script, *args]
    # As python puts the script's folder first on sys.path, or with -m the current folder.
    sys.path.insert(0, os.getcwd() if module else str(Path(script).resolve().parent))
    watch_every_loader(run)
    try:
        if module:
            runpy.run_module(script, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        run.close(_exit_reason(stop.code))
        return _exit_status(stop.code)
    except KeyboardInterrupt:
        run.close("interrupted")
        traceback.print_exc()
        _end_by(signal.SIGINT)
        return 130
    except BaseException as exc:  # the script's own error: its traceback, as Python prints it
        run.close(f"the script raised {type(exc).__name__}")
        _print_script_traceback(exc)
        return 1
    finally:
        stop_watching()
        sys.argv, sys.path[:] = saved_argv, saved_path
    run.close()
    return 0


def _exit_reason(code: object) -> str:
    return "" if code in (None, 0) else f"the script exited with status {code}"


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _print_script_traceback(exc: BaseException) -> None:
    """The traceback from the script's own frames on (this module's left out)."""
    tb = exc.__traceback__
    here = os.path.dirname(__file__)
    runpy_files = (runpy.__file__, "<frozen runpy>")
    while tb is not None and (tb.tb_frame.f_code.co_filename.startswith(here)
                              or tb.tb_frame.f_code.co_filename in runpy_files):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


def _end_by(signum: signal.Signals) -> None:
    """End this process by `signum` (its default action), as Python does after an uncaught interrupt."""
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
