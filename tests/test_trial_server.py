"""The trial server (multiprocessing's forkserver) imports a sweep's factory modules once. A
server already running for an earlier sweep in the same process is started again with a later
sweep's modules only where importing them would cost each trial (launch.RESTART_IMPORT_S)."""

from __future__ import annotations

from multiprocessing import forkserver

import pytest

from loadtune.sweep_process import launch


def _server_pid() -> int | None:
    return getattr(forkserver._forkserver, "_forkserver_pid", None)


def _module(tmp_path, name: str, body: str) -> str:
    (tmp_path / f"{name}.py").write_text(body + "\n\ndef make():\n    return list(range(8))\n")
    return f"{name}.py:make"


@pytest.mark.slow  # starts the server (torch's import) and processes forked from it
def test_a_running_server_is_started_again_only_for_modules_slow_to_import(tmp_path, monkeypatch):
    forkserver._forkserver._stop()  # type: ignore[attr-defined] - one an earlier test of this process started
    monkeypatch.setattr(launch, "_served", [])
    launch.preload([_module(tmp_path, "quick_factory_a", "")], str(tmp_path))
    first = _server_pid()
    assert first is not None and "quick_factory_a" in launch._served

    # A module quick to import (here: any, against a bar no import reaches) is left to the trials.
    with monkeypatch.context() as bar:
        bar.setattr(launch, "RESTART_IMPORT_S", launch.IMPORT_CHECK_TIMEOUT_S + 1)
        launch.preload([_module(tmp_path, "quick_factory_b", "")], str(tmp_path))
    assert _server_pid() == first and "quick_factory_b" not in launch._served

    # One that takes half a second to import would cost every trial that: the server starts again
    # with it, keeping what it imported before.
    slow = _module(tmp_path, "slow_factory", "import time\ntime.sleep(0.5)")
    assert launch._import_s(["slow_factory"]) >= 0.5
    launch.preload([slow], str(tmp_path))
    assert _server_pid() not in (None, first)
    assert {"slow_factory", "quick_factory_a", "torch"} <= set(launch._served)

    # Asked again for what it has: nothing to do.
    again = _server_pid()
    launch.preload([slow], str(tmp_path))
    assert _server_pid() == again
