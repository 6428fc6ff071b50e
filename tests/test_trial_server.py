"""The trial server (multiprocessing's forkserver) imports a sweep's factory modules once. A
server already running for an earlier sweep in the same process is started again with a later
sweep's modules only where importing them would cost each trial (launch.RESTART_IMPORT_S), and
never for a module whose import hangs or raises more than an ImportError."""

from __future__ import annotations

import sys
from multiprocessing import forkserver

import pytest

from loadtune.sweep_process import launch

SLOW = "import time\ntime.sleep(0.5)"  # half a second to import: twice launch.RESTART_IMPORT_S


def _server_pid() -> int | None:
    return getattr(forkserver._forkserver, "_forkserver_pid", None)


def _module(tmp_path, name: str, body: str) -> str:
    (tmp_path / f"{name}.py").write_text(body + "\n\ndef make():\n    return list(range(8))\n")
    return f"{name}.py:make"


@pytest.fixture
def fresh_server(monkeypatch):
    """No server running, none of this test's modules left behind in a later one."""
    launch.stop_server()
    monkeypatch.setattr(launch, "_served", [])
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    launch.stop_server()
    launch._context.set_forkserver_preload(launch.SERVER_MODULES)


@pytest.mark.slow  # starts the server (torch's import) and processes forked from it
def test_a_running_server_is_started_again_only_for_modules_slow_to_import(tmp_path, monkeypatch, fresh_server):
    # A factory given as a file is imported by the server (on the sweep's path), not by each trial.
    launch.preload([_module(tmp_path, "quick_factory_a", ""), _module(tmp_path, "slow_first", SLOW)], str(tmp_path))
    first = _server_pid()
    assert first is not None and {"quick_factory_a", "slow_first"} <= set(launch._served)
    assert launch._import_s(["slow_first"]) < launch.RESTART_IMPORT_S

    # A module quick to import (here: any, against a bar no import reaches) is left to the trials.
    with monkeypatch.context() as bar:
        bar.setattr(launch, "RESTART_IMPORT_S", launch.IMPORT_CHECK_TIMEOUT_S + 1)
        launch.preload([_module(tmp_path, "quick_factory_b", "")], str(tmp_path))
    assert _server_pid() == first and "quick_factory_b" not in launch._served

    # One that takes half a second to import would cost every trial that: the server starts again
    # with it, keeping what it imported before, and a trial forked from it no longer imports it.
    slow = _module(tmp_path, "slow_factory", SLOW)
    assert launch._import_s(["slow_factory"]) >= 0.5
    launch.preload([slow], str(tmp_path))
    assert _server_pid() not in (None, first)
    assert {"slow_factory", "quick_factory_a", "torch"} <= set(launch._served)
    assert launch._import_s(["slow_factory"]) < launch.RESTART_IMPORT_S

    # Asked again for what it has: nothing to do.
    again = _server_pid()
    launch.preload([slow], str(tmp_path))
    assert _server_pid() == again


@pytest.mark.slow
def test_a_module_that_raises_or_hangs_on_import_leaves_the_server_as_it_is(tmp_path, monkeypatch, fresh_server):
    launch.preload([_module(tmp_path, "quick_factory_c", "")], str(tmp_path))
    first = _server_pid()
    # Slow, then raising what the server's own preload does not skip: it would stop the server.
    raising = _module(tmp_path, "raising_factory", SLOW + "\nraise RuntimeError('no')")
    assert launch._import_s(["raising_factory"]) == 0.0
    launch.preload([raising], str(tmp_path))
    assert _server_pid() == first and "raising_factory" not in launch._served
    # An import that outlasts the check: the server is not started again with it.
    monkeypatch.setattr(launch, "IMPORT_CHECK_TIMEOUT_S", 0.5)
    launch.preload([_module(tmp_path, "hanging_factory", "import time\ntime.sleep(30)")], str(tmp_path))
    assert _server_pid() == first and "hanging_factory" not in launch._served
