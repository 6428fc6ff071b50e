"""A sweep on a shared machine: disturbed repeats measured again, one writer per results
file, and an output that cannot be written refused before anything is measured."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from loadtune.asked.options import SweepOptions
from loadtune.core.errors import LoadtuneError
from loadtune.decide.choice import recommended
from loadtune.measure.machine import usable_cores
from loadtune.record.findings import BusyMachine
from loadtune.sweep_process import events
from loadtune.sweep_process.files import OutputLock, check_writable, lock_path
from loadtune.sweep_process.pipeline import run_sweep
from tests.conftest import run_cli, tiny_config

# 24 ms of sleeping per batch against a 12 ms step: 4 workers keep up (compute-bound, no advice
# to follow), fewer do not: a clear winner whatever the noise.
CLEAR_WINNER = dict(sweep={"num_workers": [0, 4]}, step={"sleep_s": 0.012},
                    measure={"warmup_batches": 2, "batches": 20, "repeats": 2, "timeout_s": 60})


class HogDuring:
    """Burns every usable core during the window of one chosen run, and stops when it ends."""

    def __init__(self, trial: str) -> None:
        self.trial, self.hogs, self.done = trial, [], False

    def __call__(self, event) -> None:
        if isinstance(event, events.RunStarted) and event.trial.name == self.trial and not self.done:
            self.hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(usable_cores())]
        elif isinstance(event, events.RunFinished) and self.hogs:
            for hog in self.hogs:
                hog.kill()
                hog.wait()
            self.hogs, self.done = [], True


@pytest.mark.slow
@pytest.mark.serial  # its own hog must be the only other work
def test_a_repeat_disturbed_by_a_cpu_hog_is_measured_again(write_config, tmp_path):
    config = write_config(tiny_config(figures=True, **CLEAR_WINNER))
    hog = HogDuring("num_workers=4")
    try:
        noisy = run_sweep(SweepOptions.of(config, out=tmp_path / "noisy.csv"), on_event=hog)
    finally:
        hog(events.RunFinished(None, None))  # never leave a hog behind
    rows = {r.trial: r for r in noisy.records}
    assert rows["num_workers=4"].measuring.disturbed_repeats >= 1, rows["num_workers=4"]
    assert any(isinstance(w, BusyMachine) and "num_workers=4" in dict(w.disturbed) for w in noisy.warnings)
    assert any("the machine was busy" in str(w) and "num_workers=4" in str(w) for w in noisy.warnings)
    # The hogged repeat did not count: the pick is still the clear winner, as on a quiet machine.
    assert recommended(noisy.records).settings.num_workers == 4


@pytest.mark.slow  # the first writer is a process of its own
def test_a_second_writer_is_refused_naming_the_first_and_a_stale_lock_is_taken_over(tmp_path):
    out = tmp_path / "r.csv"
    # Another process holds the lock: refused, naming it.
    holder = subprocess.Popen([sys.executable, "-c", f"""
import sys, time
sys.argv = ["loadtune", "sweep", "other.yaml"]
from pathlib import Path
from loadtune.sweep_process.files import OutputLock
lock = OutputLock(Path({str(out)!r})).acquire()
print("held", flush=True)
time.sleep(60)
"""], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(LoadtuneError, match=rf"another sweep is writing this file \(pid {holder.pid}: "
                                                r"loadtune sweep other.yaml\)"):
            OutputLock(out).acquire()
    finally:
        holder.kill()  # gone without releasing: its lock file stays, its lock does not
        holder.wait()
    assert lock_path(out).exists()
    with OutputLock(out):  # taken over
        assert json.loads(lock_path(out).read_text())["pid"] == os.getpid()
        with pytest.raises(LoadtuneError, match=f"pid {os.getpid()}"):
            OutputLock(out).acquire()  # a second lock, even in the same process
    assert not lock_path(out).exists(), "released at the end"


@pytest.mark.slow
def test_two_sweeps_on_one_output_the_second_exits_at_once(write_config, tmp_path, marker):
    out = tmp_path / "same.csv"
    path = write_config(tiny_config(measure={"warmup_batches": 2, "batches": 40, "repeats": 2, "timeout_s": 60}))
    # In a process group of its own, killed whole below: killed while it starts its trial server
    # (which imports torch, seconds on a loaded machine), the server and multiprocessing's resource
    # tracker would otherwise outlive the test until that import ends.
    first = subprocess.Popen([sys.executable, "-m", "loadtune", "sweep", str(path), "--out", str(out)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env={**os.environ, "LOADTUNE_TEST_MARKER": marker}, start_new_session=True)
    try:
        deadline = __import__("time").monotonic() + 30
        while not lock_path(out).exists() and __import__("time").monotonic() < deadline:
            __import__("time").sleep(0.05)
        assert lock_path(out).exists()
        second = run_cli("sweep", str(path), "--out", str(out), "--resume", marker=marker, timeout=60)
        assert second.returncode == 1
        assert f"pid {first.pid}" in second.stderr and second.stderr.count("\n") == 1
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only folders")
def test_a_read_only_output_folder_is_refused_before_anything_runs(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(LoadtuneError, match="cannot write in"):
            check_writable(folder / "r.csv")
    finally:
        folder.chmod(0o700)


def test_an_output_on_a_full_disk_or_a_folder_is_refused(tmp_path):
    with pytest.raises(LoadtuneError, match="MB free on its disk"):
        check_writable(tmp_path / "r.csv", min_free_bytes=2**62)
    with pytest.raises(LoadtuneError, match="is a folder"):
        check_writable(tmp_path)


@pytest.mark.slow
def test_the_cli_refuses_an_unwritable_output_in_one_line_before_the_first_trial(write_config, tmp_path, marker):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    done = run_cli("sweep", str(write_config(tiny_config())), "--out", str(blocker / "r.csv"), marker=marker)
    assert done.returncode == 1
    assert done.stderr.startswith("Error: ") and "cannot create its folder" in done.stderr
    assert "Sweeping" not in done.stdout + done.stderr, "nothing was measured"


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc, a folder nobody can write in, root included")
def test_a_folder_nobody_can_write_in_is_refused():
    with pytest.raises(LoadtuneError, match=r"/proc/loadtune-r.csv: cannot write in /proc"):
        check_writable(__import__("pathlib").Path("/proc/loadtune-r.csv"))
