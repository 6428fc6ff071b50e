"""Faults and bad input, end to end: real failing datasets (tests/fault_datasets.py) in real
DataLoaders with real workers, through the real CLI. Each case checks the row or the message,
the exit code, that the CSV is whole (pandas reads it, the contract's columns first), that no process of
the test outlives it and that nothing new is left in /dev/shm."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from loadtune.asked.config import load_config
from loadtune.asked.plan import baseline_trial
from loadtune.sweep_process import launch
from loadtune.sweep_process.launch import run_in_trial_process
from loadtune.trial_process.jobs import TrialJob
from tests.conftest import MARKER_VAR, processes_with, run_cli, tiny_config
from tests.fault_datasets import MEMORY_LIMIT_VAR
from tests.test_cli_sweep import SPEC_COLUMNS

pytestmark = pytest.mark.slow

FAULTS = str(Path(__file__).with_name("fault_datasets.py"))
SHM = Path("/dev/shm")


def fault_config(factory: str = "make_faulty", kwargs: dict | None = None, loader: dict | None = None,
                 sweep: dict | None = None, timeout_s: float = 30) -> dict:
    """A tiny sweep over a dataset of tests/fault_datasets.py: batch 4, 1 worker, short windows."""
    return tiny_config(
        dataset={"factory": f"{FAULTS}:{factory}", "kwargs": kwargs or {}},
        loader={"batch_size": 4, "num_workers": 1, **(loader or {})},
        sweep={} if sweep is None else sweep,
        step={"sleep_s": 0.001},
        measure={"warmup_batches": 1, "batches": 4, "repeats": 1, "timeout_s": timeout_s},
    )


def read_csv(path: Path) -> pd.DataFrame:
    """The results CSV as a user reads it; whole, with the contract's columns first and in order."""
    df = pd.read_csv(path)
    assert list(df.columns[: len(SPEC_COLUMNS)]) == SPEC_COLUMNS
    # predicted: configs of the space the model scored and the sweep did not measure.
    assert set(df.status) <= {"ok", "skipped", "failed", "timeout", "predicted"}
    not_run = df[df.status != "ok"]
    assert not_run["rank"].isna().all() and not_run.reason.notna().all()
    return df


def sweep(config_path: Path, out: Path, marker: str, *args: str, timeout: float = 120):
    """Run `loadtune sweep` and return its result and the CSV's rows by trial: exit 0, or where no
    trial ran (the ideal is no trial) exit 1 with one `Error:` line, the rows still in the CSV."""
    result = run_cli("sweep", str(config_path), "--out", str(out), *args, marker=marker, timeout=timeout)
    rows = read_csv(out).set_index("trial")
    if ((rows.status == "ok") & (rows.index != "ideal")).any():
        assert result.returncode == 0, result.stderr
    else:
        assert "no trial ran successfully" in user_error(result)
    return result, rows


def user_error(result: subprocess.CompletedProcess) -> str:
    """The one `Error:` line of a run that exit 1, with no traceback."""
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert lines and lines[-1].startswith("Error: "), result.stderr
    return lines[-1]


def _shm_entries() -> set[str]:
    return set(os.listdir(SHM)) if SHM.is_dir() else set()


def _pid_of(name: str) -> int | None:
    """The pid in a torch /dev/shm file's name (torch_<pid>_...); None for other files."""
    prefix, _, rest = name.partition("_")
    pid = rest.partition("_")[0]
    return int(pid) if prefix == "torch" and pid.isdigit() else None


def _marker_of(name: str) -> str | None:
    """The test marker of the live process that made a /dev/shm file ("" for a process outside the
    tests); None when the file is not torch's or its process is gone."""
    pid = _pid_of(name)
    if pid is None:
        return None
    try:
        return psutil.Process(pid).environ().get(MARKER_VAR, "")
    except psutil.Error:  # gone (or not readable)
        return None


class _ShmMakers(threading.Thread):
    """While a test runs, the marker of each /dev/shm file's maker, read while it lives, and the
    pids of the test's own processes: a worker killed by another test (the other one of make
    test's parallel step) can leave a file that outlives it before its maker was seen."""

    POLL_S = 0.05

    def __init__(self, marker: str) -> None:
        super().__init__(daemon=True)
        self.marker = marker
        self.makers: dict[str, str] = {}
        self.ours: set[int] = set()
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(self.POLL_S):
            self.ours.update(p.pid for p in processes_with(self.marker))
            for name in _shm_entries() - self.makers.keys():
                if (maker := _marker_of(name)) is not None:
                    self.makers[name] = maker

    def stop(self) -> "_ShmMakers":
        self._done.set()
        self.join()
        return self

    def made_by_this_test(self, name: str) -> bool:
        """A file is the test's when its maker carried the test's marker (seen alive, or alive
        now), or, where the maker was never seen, when its pid was one of the test's processes.
        A file that is not torch's (no pid in its name) counts as the test's."""
        maker = self.makers.get(name)
        if maker is None:
            maker = _marker_of(name)
        if maker is not None:
            return maker == self.marker
        pid = _pid_of(name)
        return pid is None or pid in self.ours


@pytest.fixture
def clean(marker):
    """The `marker` of the test; afterwards, none of its processes and no new /dev/shm file."""
    before = _shm_entries()
    makers = _ShmMakers(marker)
    makers.start()
    yield marker
    deadline = time.monotonic() + 5
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    seen = makers.stop()
    new = _shm_entries() - before
    while new and time.monotonic() < deadline + 2:  # let other programs' short-lived files go
        time.sleep(0.2)
        new &= _shm_entries()
    new = {name for name in new if seen.made_by_this_test(name)}
    assert not new, f"left in /dev/shm: {sorted(new)}"


# --- A dataset that fails while loading: the row says what, where, and in which process ---------

def test_a_sample_that_raises_names_its_type_message_and_index(write_config, tmp_path, clean):
    """One sweep: in a worker of the platform's default context (baseline), in a worker started
    with spawn, and in the trial process itself (num_workers=0). No trial ran: exit 1, naming
    the first failure."""
    config = fault_config(kwargs={"fault": "raise", "at": 13},
                          sweep={"num_workers": [0], "multiprocessing_context": ["spawn"]})
    result, rows = sweep(write_config(config), tmp_path / "f.csv", clean)
    in_worker = "ValueError: corrupt record 13 (at dataset index 13, in DataLoader worker process 0)"
    for trial in ("baseline", "multiprocessing_context=spawn"):
        assert rows.loc[trial, "status"] == "failed"
        assert rows.loc[trial, "reason"] == in_worker
        assert f"{trial}: failed: ValueError: corrupt record 13" in result.stderr
    assert rows.loc["num_workers=0", "status"] == "failed"
    assert rows.loc["num_workers=0", "reason"] == "ValueError: corrupt record 13 (at dataset index 13)"
    assert rows.loc["ideal", "status"] == "ok", "its one batch (indices 0-3) loads"
    assert user_error(result).startswith("Error: no trial ran successfully; the first, baseline, failed: "
                                         "ValueError: corrupt record 13")


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"kwargs": {"fault": "object", "at": 0}},
         "TypeError: default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
         "found <class 'object'> (in collate_fn, batch of dataset indices [0, 1, 2, 3], "
         "in DataLoader worker process 0)"),
        ({"kwargs": {"fault": "ragged", "at": 0}},
         "RuntimeError: stack expects each tensor to be equal size"),
        ({"loader": {"collate_fn": f"{FAULTS}:collate_raises"}},
         "RuntimeError: collate_fn: cannot pad a batch of nothing (in collate_fn, batch of dataset indices "
         "[0, 1, 2, 3], in DataLoader worker process 0)"),
        ({"loader": {"worker_init_fn": f"{FAULTS}:init_raises"}},
         "RuntimeError: worker_init_fn: no GPU for worker 0 (in DataLoader worker process 0)"),
    ],
    ids=["object", "ragged", "collate_fn", "worker_init_fn"],
)
def test_batches_that_cannot_be_made_fail_with_the_reason(write_config, tmp_path, clean, changes, expected):
    config = fault_config(**changes)
    _, rows = sweep(write_config(config), tmp_path / "c.csv", clean)
    assert rows.loc["baseline", "status"] == "failed"
    assert rows.loc["baseline", "reason"].startswith(expected), rows.loc["baseline", "reason"]


@pytest.mark.parametrize(
    ("sig", "where", "expected"),
    [
        # One sweep: the baseline's worker killed, then the trial process itself (num_workers=0).
        ("SIGSEGV", "any", {"baseline": "killed by SIGSEGV (Segmentation fault)",
                            "num_workers=0": "trial process killed by SIGSEGV (Segmentation fault)"}),
        ("SIGKILL", "worker", {"baseline": "killed by SIGKILL (Killed); out of memory?"}),
    ],
    ids=["SIGSEGV", "SIGKILL"],
)
def test_a_process_killed_by_a_signal_is_a_failed_row_naming_it(write_config, tmp_path, clean, sig, where, expected):
    sweep_axes = {"num_workers": [0]} if "num_workers=0" in expected else {}
    config = fault_config(kwargs={"fault": "signal", "sig": sig, "where": where, "at": 6}, sweep=sweep_axes)
    _, rows = sweep(write_config(config), tmp_path / "s.csv", clean)
    for trial, reason in expected.items():
        assert rows.loc[trial, "status"] == "failed"
        assert reason in rows.loc[trial, "reason"], rows.loc[trial, "reason"]
    assert rows.loc["baseline", "reason"].startswith("DataLoader worker (pid ")
    assert rows.loc["ideal", "status"] == "ok"


def test_out_of_memory_under_a_limit_is_a_failed_row_naming_memoryerror(write_config, tmp_path, clean,
                                                                         monkeypatch):
    # The dataset limits its own address space (RLIMIT_AS) in the process that loads it.
    monkeypatch.setenv(MEMORY_LIMIT_VAR, "256")
    config = fault_config("make_memory_hog", {"at": 8}, sweep={"num_workers": [0]})
    _, rows = sweep(write_config(config), tmp_path / "m.csv", clean)
    assert rows.loc["baseline", "status"] == "failed"
    assert rows.loc["baseline", "reason"] == "MemoryError (at dataset index 8, in DataLoader worker process 0)"
    assert rows.loc["num_workers=0", "reason"] == "MemoryError (at dataset index 8)"
    assert rows.loc["ideal", "status"] == "ok"


# --- Hangs: a timeout row after measure.timeout_s, and the whole tree killed ------------------------

@pytest.mark.serial  # the bounds on the walls are measured figures
def test_a_hang_times_out_and_its_process_tree_is_killed(write_config, tmp_path, clean):
    """One sweep: the baseline hangs in one of its 2 workers, num_workers=0 in the trial process."""
    config = fault_config(kwargs={"fault": "hang", "where": "any", "at": 8}, loader={"num_workers": 2},
                          sweep={"num_workers": [0]}, timeout_s=3)
    start = time.monotonic()
    _, rows = sweep(write_config(config), tmp_path / "h.csv", clean)
    assert time.monotonic() - start < 30
    for trial in ("baseline", "num_workers=0"):
        assert rows.loc[trial, "status"] == "timeout"
        assert "measure.timeout_s=3s" in rows.loc[trial, "reason"]
        assert 3 <= rows.loc[trial, "trial_wall_s"] < 6
    assert rows.loc["ideal", "status"] == "ok"


def test_run_in_trial_process_kills_the_tree_before_it_returns(write_config, tmp_path):
    """In this process, which stays alive: the trial's own watchdog cannot be what kills them. The
    tree: the trial process and its worker in their process group, and a child of the worker that
    left the group for a session of its own."""
    record = tmp_path / "pids"
    record.mkdir()
    config = fault_config(kwargs={"fault": "hang", "where": "worker", "at": 4, "record": str(record),
                                  "escape": True}, loader={"num_workers": 2})
    spec = load_config(write_config(config))
    cfg = spec.config
    job = TrialJob(baseline_trial(cfg), cfg.dataset, cfg.step, cfg.measure, "cpu", str(spec.base_dir),
                   os.getpid(), multiprocessing.get_all_start_methods()[0])  # the platform's default
    warm = launch._context.Process(target=os.getpid)  # the trial server up (torch imported) before the clock runs
    warm.start()
    warm.join()
    # Long enough for a trial to build its dataset and start its workers on a busy machine.
    outcome = run_in_trial_process(job, timeout_s=8)
    assert outcome.status == "timeout"
    pids = [int(p.name) for p in record.iterdir()]
    assert len(pids) >= 3, "a worker, the trial process and the escaped child"
    deadline = time.monotonic() + 1
    while (alive := [p for p in pids if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive, f"still running after run_in_trial_process returned: {alive}"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# --- Nothing to load --------------------------------------------------------------------------------

def test_an_empty_dataset_is_refused_before_any_trial(write_config, tmp_path, clean):
    out = tmp_path / "e.csv"
    result = run_cli("sweep", str(write_config(fault_config("make_empty"))), "--out", str(out), marker=clean,
                     timeout=60)
    line = user_error(result)
    assert f"dataset factory '{FAULTS}:make_empty' returned an empty dataset (len 0)" in line
    assert not out.exists()


def test_a_batch_larger_than_the_dataset_with_drop_last_fails_that_trial(write_config, tmp_path, clean):
    config = fault_config(kwargs={"n": 3}, loader={"drop_last": True}, sweep={"drop_last": [False]})
    _, rows = sweep(write_config(config), tmp_path / "d.csv", clean)
    assert rows.loc["baseline", "status"] == "failed"
    assert rows.loc["baseline", "reason"] == (
        "EmptyLoaderError: batch_size=4 is larger than the dataset (len 3) and drop_last=true drops the only, "
        "incomplete batch: the DataLoader yields no batch")
    assert rows.loc["ideal", "status"] == "failed" and "batch_size=4" in rows.loc["ideal", "reason"]
    assert rows.loc["drop_last=false", "status"] == "ok" and rows.loc["drop_last=false", "rank"] == 1


# --- User code that cannot even be built: `Error: …`, exit 1, naming the spec -------------------------
# (tests/test_cli_sweep.py covers a missing module, a missing attribute, a factory raising TypeError
# on a bad kwarg, a missing file and a factory returning a str.)

NEEDS_MISSING = "import not_installed_pkg_xyz\n\ndef make():\n    return []\n"
ARGPARSE_AT_IMPORT = textwrap.dedent("""
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, required=True)
    args = parser.parse_args()  # the script's command line, parsed when it is imported

    def make():
        return []
""")
SYNTAX_ERROR = "def make(:\n    return []\n"


@pytest.mark.parametrize(
    ("factory", "files", "loader", "expected"),
    [
        (f"{FAULTS}:make_raising", {}, {},
         f"dataset factory '{FAULTS}:make_raising' raised FileNotFoundError: no such directory: /data/train"),
        (f"{FAULTS}:make_raising_bracketed", {}, {},
         "raised FileNotFoundError: no such directory: [/data/train] [bold]"),
        (f"{FAULTS}:make_none", {}, {}, f"dataset factory '{FAULTS}:make_none' returned NoneType, not a torch Dataset"),
        (f"{FAULTS}:make_exiting", {}, {}, f"dataset factory '{FAULTS}:make_exiting' called sys.exit(2)"),
        (f"{FAULTS}:make_no_length", {}, {},
         "returned a NoLength whose len() fails: RuntimeError: index file missing: cannot count samples"),
        ("needs.py:make", {"needs.py": NEEDS_MISSING}, {},
         "dataset factory 'needs.py:make': cannot import: ModuleNotFoundError: No module named "
         "'not_installed_pkg_xyz'"),
        ("train.py:make", {"train.py": ARGPARSE_AT_IMPORT}, {},
         "dataset factory 'train.py:make': importing it called sys.exit(2); move what runs at import under"),
        ("broken.py:make", {"broken.py": SYNTAX_ERROR}, {},
         "dataset factory 'broken.py:make': cannot import: SyntaxError"),
        (f"{FAULTS}:make_faulty", {}, {"collate_fn": "no_such_collate_mod:pad"},
         "loader.collate_fn 'no_such_collate_mod:pad': cannot import: ModuleNotFoundError"),
    ],
    ids=["raises", "raises-with-brackets", "returns-none", "sys-exit", "len-raises", "imports-missing",
         "argparse-at-import", "syntax-error", "collate-missing"],
)
def test_user_code_that_cannot_be_built_exits_1_naming_the_spec(write_config, tmp_path, clean, factory, files,
                                                                loader, expected):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    config = fault_config(loader=loader)
    config["dataset"]["factory"] = factory
    out = tmp_path / "u.csv"
    result = run_cli("sweep", str(write_config(config)), "--out", str(out), marker=clean, timeout=60)
    assert expected in user_error(result)
    assert not out.exists(), "refused before anything ran"


@pytest.mark.parametrize(
    ("text", "where", "problem"),
    [
        ("name: x\nloader: {batch_size: 8\nstep: {sleep_s: 0.1}\n", ":3:5:",
         "expected ',' or '}', but got ':' (while parsing a flow mapping that starts at line 2, column 9)"),
        ("name: x\nstep:\n\tsleep_s: 0.1\n", ":3:1:",
         "found character '\\t' that cannot start any token (while scanning for the next token)"),
        ("name: x\n  step: 1\n", ":2:7:", "mapping values are not allowed here"),
    ],
    ids=["unclosed-brace", "tab", "bad-indent"],
)
def test_yaml_that_does_not_parse_exits_1_with_file_line_and_column(write_config, tmp_path, clean, text, where,
                                                                     problem):
    path = write_config(text, "broken.yaml")
    out = tmp_path / "y.csv"
    result = run_cli("sweep", str(path), "--out", str(out), marker=clean, timeout=60)
    assert user_error(result) == f"Error: {path}{where} could not parse YAML: {problem}"
    assert not out.exists()


def test_a_config_that_is_not_text_or_a_bad_set_value_exits_1(write_config, tmp_path, clean):
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"name: \xff\xfe\x00\n")
    line = user_error(run_cli("sweep", str(path), marker=clean, timeout=60))
    assert line == f"Error: {path}: not a text file (byte 0xff at offset 6 is not UTF-8)"
    good = write_config(fault_config())
    line = user_error(run_cli("sweep", str(good), "--set", "loader.batch_size=[8", marker=clean, timeout=60))
    assert line.startswith("Error: --set loader.batch_size: value '[8' is not valid YAML")
    line = user_error(run_cli("sweep", str(good), "--set", "measure.timeout_s=.inf", marker=clean, timeout=60))
    assert "measure.timeout_s = inf: Input should be a finite number" in line


# --- The sweep itself stopped: rows kept, a valid CSV, nothing left running ---------------------------

def _sweep_that_hangs_at_two_workers(write_config, tmp_path: Path) -> tuple[Path, Path]:
    """Six short trials, but the one with 2 workers hangs while `flag` exists (timeout_s 60):
    stopped during that trial, only the stop itself can end it."""
    flag = tmp_path / "hang-at-2-workers"
    flag.touch()
    config = tiny_config(
        dataset={"factory": f"{FAULTS}:make_faulty",
                 "kwargs": {"n": 400, "cost_s": 0.003, "fault": "hang", "at": 0, "when_workers": 2,
                            "while_exists": str(flag)}},
        sweep={"num_workers": [0, 2], "prefetch_factor": [1, 4]},
        measure={"warmup_batches": 1, "batches": 8, "repeats": 1, "timeout_s": 60})
    return write_config(config), flag


def _start(config: Path, out: Path, marker: str, *args: str) -> subprocess.Popen:
    """The sweep as from a terminal: Ctrl-C not ignored, even when these tests run as a background
    job (where the shell ignores SIGINT, and every process started from it inherits that)."""
    env = {**os.environ, MARKER_VAR: marker, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "loadtune", "sweep", str(config), "--out", str(out), *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _trial_tree(sweep_proc: subprocess.Popen, marker: str) -> list[psutil.Process]:
    """The processes of the running trial: the marked ones outside the sweep's process group."""
    sweep_group = os.getpgid(sweep_proc.pid)
    tree = []
    for proc in processes_with(marker):
        try:
            if os.getpgid(proc.pid) != sweep_group:
                tree.append(proc)
        except ProcessLookupError:
            continue
    return tree


def _wait_for_hung_trial(proc: subprocess.Popen, marker: str) -> list[psutil.Process]:
    """Wait until the trial with 2 workers runs (3 processes in a group of their own)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        tree = _trial_tree(proc, marker)
        if len(tree) >= 3:
            return tree
        time.sleep(0.05)
    pytest.fail(f"the trial with 2 workers did not start (sweep exit code {proc.poll()})")


def _kept(out: Path) -> pd.DataFrame:
    """The rows of a stopped sweep's CSV (a valid one): only trials that ran, none with 2 workers."""
    df = read_csv(out)
    assert len(df) < 6 and set(df.status) <= {"ok"} and "num_workers=2" not in set(df.trial)
    return df.set_index("trial")


def _stop_with_sigkill(proc: subprocess.Popen, tree: list[psutil.Process], out: Path) -> pd.DataFrame:
    """SIGKILL of the sweep during the hung trial: the trial's tree goes down with it (its
    watchdog); the rows appended before the kill are in a valid CSV, and returned."""
    proc.kill()  # not reaped yet: to the trial's watchdog the sweep is a zombie, still "there"
    killed = time.monotonic()
    while [p for p in tree if _alive(p.pid)] and time.monotonic() - killed < 3:
        time.sleep(0.05)
    left = [p.pid for p in tree if _alive(p.pid)]
    proc.communicate(timeout=30)
    assert not left, f"trial processes still running 3 s after the sweep was killed: {left}"
    return _kept(out)


def _stop_with(sig: int, proc: subprocess.Popen, tree: list[psutil.Process], out: Path, kept: pd.DataFrame) -> None:
    """SIGTERM or SIGINT (Ctrl-C) during the hung trial: exit 130, saying how to resume, the rows
    `kept` as they were."""
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    # Checked at once: the sweep killed them before it exited (the trial's watchdog would be late).
    assert not [p.pid for p in tree if _alive(p.pid)]
    assert proc.returncode == 130, stderr
    assert "Interrupted" in stderr and "--resume" in stderr
    assert _kept(out).loc[kept.index, ["started_at", "throughput"]].equals(kept[["started_at", "throughput"]])


def test_a_stopped_sweep_keeps_its_rows_and_resume_finishes_it(write_config, tmp_path, clean):
    """Killed (SIGKILL) during a trial that hangs; resumed and hanging again, stopped by SIGTERM,
    then by Ctrl-C; with the hang fixed, --resume measures only what is missing."""
    config, flag = _sweep_that_hangs_at_two_workers(write_config, tmp_path)
    out = tmp_path / "k.csv"
    proc = _start(config, out, clean)
    kept = _stop_with_sigkill(proc, _wait_for_hung_trial(proc, clean), out)
    for sig in (signal.SIGTERM, signal.SIGINT):
        proc = _start(config, out, clean, "--resume")
        _stop_with(sig, proc, _wait_for_hung_trial(proc, clean), out, kept)
    kept_ok = _kept(out)

    flag.unlink()  # the hang is fixed; resume measures only what is missing
    result = run_cli("sweep", str(config), "--out", str(out), "--resume", marker=clean)
    assert result.returncode == 0, result.stderr
    if len(kept_ok):
        assert f"Resuming: {len(kept_ok)} trials kept" in result.stderr
    final = read_csv(out).set_index("trial")
    # Round 1 in full; what follows on top of the winner (follow-up rounds, `combined`, the
    # advice of its verdict) depends on which trial wins, so only its rounds are checked.
    first_round = final[final["round"] == 1]
    assert set(first_round.index) == {"baseline", "ideal", "num_workers=0", "num_workers=2",
                                      "prefetch_factor=1", "prefetch_factor=4"}
    measured = final[final.status != "predicted"]  # the rest: configs the model only predicted
    assert (measured.loc[~measured.index.isin(first_round.index), "round"] > 1).all()
    # Run, or left out where the measured fetch time of its workers bounds it below the leader.
    assert set(measured.status) <= {"ok", "skipped"}
    assert measured[measured.status == "skipped"].reason.str.contains("it would need to contend").all()
    for trial in kept_ok.index:  # kept as measured, not run again
        assert final.loc[trial, "started_at"] == kept_ok.loc[trial, "started_at"]
        assert final.loc[trial, "throughput"] == kept_ok.loc[trial, "throughput"]
    new = final[~final.index.isin(kept_ok.index)]
    assert new.started_at.nunique() == 1, "the rest measured by the last sweep"
    assert not set(new.started_at) & set(kept_ok.started_at)
