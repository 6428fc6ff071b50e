"""`loadtune watch SCRIPT [ARGS]...`: an unchanged training script run as `python SCRIPT ARGS` runs
it (in this process, as __main__, with its argv and its folder first on sys.path), every
DataLoader it iterates watched. Its output and exit status pass through; a script that raises
leaves the rows measured so far (and Python's traceback and exit status); an interrupt ends the
process by the same signal, as Python's own would."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import runpy
import signal
import sys
import traceback
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Iterator

from loadtune.core.errors import ConfigError, ScriptError
from loadtune.training_process.hook import stop_watching, watch_every_loader
from loadtune.training_process.run import run_for
from loadtune.training_process.tune import tuned_for


def run_script(script: str, args: list[str], *, out: str | None, every_s: float, module: bool = False,
               tune: bool = False) -> int:
    """Run the script (or, with `module`, the module, as `python -m` does) watched (with `tune`,
    each DataLoader it iterates tuned: loadtune.tune); its exit status."""
    if not every_s > 0:
        raise ConfigError(f"--every must be a number of seconds above 0, got {every_s:g}")
    with _as_python_runs(script, args, module):
        if module:
            _check_module(script)
        else:
            _check_script(script)
        name = script.rsplit(".", 1)[-1] if module else Path(script).stem
        run = run_for(out, every_s, name, script=script)
        watch_every_loader(run, tune=(lambda loader: tuned_for(loader, run)) if tune else None)
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
        run.close()  # with the script's argv, which NAME.loader.json records
    return 0


@contextlib.contextmanager
def _as_python_runs(script: str, args: list[str], module: bool) -> Iterator[None]:
    """sys.argv and sys.path as `python SCRIPT ARGS` (or `python -m`) has them, restored after."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [script, *args]
    # As python puts the script's folder first on sys.path, or with -m the current folder.
    sys.path.insert(0, os.getcwd() if module else str(Path(script).resolve().parent))
    try:
        yield
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def _check_script(script: str) -> None:
    """A ScriptError where `python SCRIPT` would find no file to run: none there, or a folder."""
    path = Path(script)
    if path.is_file():
        return
    if not path.is_dir():
        raise ScriptError(f"{script}: no such script")
    main = path / "__main__.py"
    if not main.is_file():
        raise ScriptError(f"{script}: is a directory, not a script: give the training script's file")
    as_module = f" or run it as a module from the folder above it (loadtune watch -m {path.resolve().name})" \
        if path.resolve().name.isidentifier() else ""
    raise ScriptError(f"{script}: is a directory, not a script; it has a __main__.py: point at the file "
                      f"(loadtune watch {main}){as_module}")


def _check_module(name: str) -> None:
    """A ScriptError where `python -m NAME` would find no module to run: not a module name, no
    such module, or a package without a __main__ module. A module whose own import fails (or a
    package's above it) is left to fail as it runs, with its traceback."""
    if Path(name).is_file():
        raise ScriptError(f"{name}: a file, not a module name: leave out -m to run it as a script")
    if not all(part.isidentifier() for part in name.split(".")):
        raise ScriptError(f"{name!r}: not a module name (names joined by dots, like pkg.train)")
    spec, missing = _spec(name)
    if missing:
        raise ScriptError(f"{name}: no module named {name}")
    if spec is not None and spec.submodule_search_locations is not None and _spec(f"{name}.__main__")[1]:
        raise ScriptError(f"{name}: a package without a __main__ module, so it cannot be run with -m: "
                          f"give one of its modules (-m {name}.MODULE)")


def _spec(name: str) -> tuple[ModuleSpec | None, bool]:
    """The module's spec, and whether it is known to be missing (it, or a package above it, is
    found nowhere); (None, False) where importing a package above it fails its own way."""
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        return None, name == missing or name.startswith(missing + ".")
    except Exception:  # noqa: BLE001 - the package's own import fails: as it runs, with its traceback
        return None, False
    return spec, spec is None


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
