"""The watch of a real training run (loadtune.watch, loadtune watch SCRIPT): its arithmetic with a fake
clock and a fake loader (exact), then real DataLoaders with workers, scripts that fail, and ranks."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from loadtune.core.kinds import Status
from loadtune.decide.stats import summarize, window_figures
from loadtune.record.record import read_records
from loadtune.record.run_epochs import AS_MEASURED
from loadtune.record.samples import read_samples, samples_file
from loadtune.record.watched import loader_file
from loadtune.training_process.run import WARN_WAIT_RATIO, RunWatch, end_line
from loadtune.training_process.tally import SHORT_TAIL_SHARE, Clocks
from loadtune.training_process.watch import _MEASURE, LoaderWatch, WatchHooks, WatchSampling

# Dyadic times: every sum below is exact in floating point.
FETCH_S, STEP_S, START_S = 1 / 16, 3 / 16, 1 / 2
BATCH = 4


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class FakeLoader:
    """A loader whose next() takes FETCH_S on the clock, and whose iter() (its workers' start) START_S."""

    batch_size = BATCH
    num_workers = 0

    def __init__(self, clock: FakeClock, batches: int, fetch_s=FETCH_S, start_s=START_S) -> None:
        self.clock, self.batches, self.fetch_s, self.start_s = clock, batches, fetch_s, start_s

    def __len__(self) -> int:
        return self.batches

    def __iter__(self):
        self.clock.t += self.start_s
        return self._batches()

    def _batches(self):
        for i in range(self.batches):
            self.clock.t += self.fetch_s(i) if callable(self.fetch_s) else self.fetch_s
            yield [i] * BATCH


def _watch(clock: FakeClock, loader: FakeLoader, every_s: float = 1.0) -> tuple[LoaderWatch, list]:
    seen: list = []
    watch = LoaderWatch(loader, "fake", every_s, clocks=Clocks(clock, lambda: 0.0),
                        sampling=WatchSampling(tree=False, device_idle=None),
                        hooks=WatchHooks(on_interval=lambda w: seen.append(w.kept.last)))
    return watch, seen


def _train(watch: LoaderWatch, loader: FakeLoader, clock: FakeClock, epochs: int, step_s=STEP_S,
           between_s: float = 0.0) -> None:
    for _ in range(epochs):
        for _batch in watch.iterate(lambda: iter(loader)):
            clock.t += step_s
        clock.t += between_s  # validation, checkpoints: neither wait nor step


def test_waits_and_steps_per_batch_exact_after_the_sweeps_warmup():
    clock = FakeClock()
    loader = FakeLoader(clock, 30)
    watch, seen = _watch(clock, loader)
    _train(watch, loader, clock, epochs=1)
    watch.close()
    observed = watch.observed()
    warmup = _MEASURE.warmup_batches  # no workers: no per-worker extra
    assert observed.warm_up.warmup_batches == warmup
    assert observed.warm_up.first_batch_s == START_S + FETCH_S  # the iterator's start belongs to the first wait
    assert observed.warm_up.warmup_s == (warmup - 1) * (FETCH_S + STEP_S) + STEP_S
    counted = [b for w in observed.windows for b in w.wait_s]
    assert len(counted) == 30 - warmup  # the last batch's step ended at the ask that ended the epoch
    # every_s = 1 s holds 4 batches of 1/4 s: windows of 4, the run's short tail joined to the last
    assert [len(w) for w in observed.windows][:-1] == [4] * ((30 - warmup) // 4 - 1)
    assert sum(len(w) for w in observed.windows) == 30 - warmup
    for window in observed.windows:
        assert set(window.wait_s) == {FETCH_S} and set(window.step_s) == {STEP_S}
        assert window.samples == (BATCH,) * len(window)
    assert len(seen) == len(observed.windows) + 1  # the tail came as an interval of its own, then joined


def test_an_epoch_start_is_the_first_batchs_wait_and_time_between_epochs_counts_nowhere():
    clock = FakeClock()
    loader = FakeLoader(clock, 16)
    watch, _ = _watch(clock, loader, every_s=100.0)
    _train(watch, loader, clock, epochs=3, between_s=7.0)
    watch.close()
    (window,) = watch.observed().windows
    warmup = _MEASURE.warmup_batches
    assert len(window) == 3 * 16 - warmup
    starts = [i for i, s in enumerate(window.epoch_start) if s]
    assert starts == [16 - warmup, 32 - warmup]
    for i in starts:
        assert window.wait_s[i] == START_S + FETCH_S
        assert window.step_s[i - 1] == STEP_S  # the 7 s between epochs is in neither part
    assert window.epoch_pos == warmup
    assert window.positions()[starts[0]] == 0
    # The row's figures are the counted batches as they came (each epoch start in its place), not a
    # window weighed for another epoch length as a sweep's: wait over wall, samples over wall.
    ratio, throughput = window_figures(watch.observed().measurement(), AS_MEASURED)[0]
    total = sum(window.wait_s) + sum(window.step_s)
    assert ratio == pytest.approx(sum(window.wait_s) / total, rel=1e-12)
    assert throughput == pytest.approx(BATCH * len(window) / total, rel=1e-12)
    stats = summarize(watch.observed().measurement(), run_epoch_batches=AS_MEASURED, batch_floor=False)
    assert stats.wait_ratio.mean == pytest.approx(sum(window.wait_s) / total, rel=1e-12)


def test_a_loop_that_leaves_an_epoch_early_leaves_its_last_batch_uncounted():
    clock = FakeClock()
    loader = FakeLoader(clock, 40)
    watch, _ = _watch(clock, loader, every_s=100.0)
    for _ in range(2):
        for i, _batch in enumerate(watch.iterate(lambda: iter(loader))):
            clock.t += STEP_S
            if i == 19:
                clock.t += 5.0  # after its step, the loop breaks out: this batch's step end is never seen
                break
    watch.close()
    (window,) = watch.observed().windows
    assert len(window) == 2 * 19 - _MEASURE.warmup_batches
    assert max(window.step_s) == STEP_S


def test_the_last_interval_joins_the_one_before_only_when_short():
    for batches, tail_joined in ((5 + 8 + 1, True), (5 + 8 + 3, False)):
        clock = FakeClock()
        loader = FakeLoader(clock, batches)
        watch, _ = _watch(clock, loader, every_s=1.0)
        _train(watch, loader, clock, epochs=1)
        watch.close()
        sizes = [len(w) for w in watch.observed().windows]
        tail = (batches - 5) % 4
        assert (tail * 0.25 < SHORT_TAIL_SHARE * 1.0) is tail_joined
        assert sizes == ([4, 4 + tail] if tail_joined else [4, 4, tail]), sizes


def test_the_intervals_bookkeeping_is_neither_step_nor_wait_and_the_tail_is_judged_by_its_batches():
    clock = FakeClock()
    loader = FakeLoader(clock, 5 + 8 + 1)

    def slow_bookkeeping(watch):  # writing the row and the file takes 3 s of the loop's time
        clock.t += 3.0

    watch = LoaderWatch(loader, "fake", 1.0, clocks=Clocks(clock, lambda: 0.0),
                        sampling=WatchSampling(tree=False, device_idle=None),
                        hooks=WatchHooks(on_interval=slow_bookkeeping))
    _train(watch, loader, clock, epochs=1)
    clock.t += 60.0  # the script goes on (evaluation, saving) before the process ends
    watch.close()
    windows = watch.observed().windows
    assert [len(w) for w in windows] == [4, 5]  # the one-batch tail joined: its own time is 1/4 s
    assert {b for w in windows for b in w.wait_s} == {FETCH_S}
    assert {b for w in windows for b in w.step_s} == {STEP_S}


def test_warnings_come_once_per_verdict_not_every_interval(tmp_path):
    clock = FakeClock()
    lines: list[tuple[str, int]] = []
    run = RunWatch(tmp_path / "run.csv", 1.0, say=lambda line, level: lines.append((line, level)),
                   sample_tree=False, clock=clock, cpu_clock=lambda: 0.0)
    # A slow loader: waits 3/4 of each batch, far above WARN_WAIT_RATIO.
    loader = FakeLoader(clock, 200, fetch_s=3 * STEP_S)
    watch = run.watch(loader, "slow")
    watch.sampling.device_idle = None
    _train(watch, loader, clock, epochs=1)
    rows = run.close()
    status = [line for line, level in lines if "samples/s, wait ratio" in line and "warning" not in line]
    warnings = [line for line, level in lines if "warning" in line]
    intervals = len(status)
    assert intervals >= 20
    assert 3 * STEP_S / (4 * STEP_S) > WARN_WAIT_RATIO
    # once for the verdict, then again only after WARN_REPEAT_INTERVALS intervals
    assert 1 <= len(warnings) <= 1 + intervals // 10
    assert all("wait ratio 0.75" in line for line in status)
    (row,) = rows
    assert row.status == Status.WATCHED and row.trial == "slow"
    assert row.measuring.dist_rank == 0 and row.measuring.ranks == 1
    assert row.wait_ratio == pytest.approx(0.75) and row.figures.step_ms == pytest.approx(STEP_S * 1e3)
    assert row.throughput == pytest.approx(BATCH / (4 * STEP_S), abs=0.005)  # the column keeps 2 digits
    assert lines[-1][0] == end_line(rows, tmp_path / "run.csv")
    assert f"loadtune predict {tmp_path / 'run.csv'}" in lines[-1][0]
    (written,) = read_records(tmp_path / "run.csv")
    assert (written.trial, written.status, written.throughput, written.assessment.verdict) == \
        (row.trial, row.status, row.throughput, row.assessment.verdict)
    assert written.measuring.batches == 200 - _MEASURE.warmup_batches  # every counted batch, over its intervals


def test_a_second_run_into_the_same_file_writes_beside_it_and_says_where(tmp_path):
    """An earlier run's result is never replaced unasked: the next run's rows go to NAME-2.csv."""
    out = tmp_path / "run.csv"
    said: list[list[str]] = []
    for _ in range(2):
        clock = FakeClock()
        lines: list[str] = []
        run = RunWatch(out, 1.0, say=lambda line, level: lines.append(line), sample_tree=False, clock=clock,
                       cpu_clock=lambda: 0.0)
        loader = FakeLoader(clock, 60)
        watch = run.watch(loader, "train")
        watch.sampling.device_idle = None
        _train(watch, loader, clock, epochs=1)
        run.close()
        said.append(lines)
    beside = tmp_path / "run-2.csv"
    assert [len(read_records(p)) for p in (out, beside)] == [1, 1]
    assert not any("earlier run" in line for line in said[0])
    assert f"loadtune: {out} holds an earlier run: this run's rows go to {beside}" in said[1]
    assert f"loadtune predict {beside}" in said[1][-1]


def test_a_run_too_short_for_its_warmup_says_so_and_writes_no_row(tmp_path):
    clock = FakeClock()
    lines: list[str] = []
    run = RunWatch(tmp_path / "run.csv", 1.0, say=lambda line, level: lines.append(line), sample_tree=False,
                   clock=clock, cpu_clock=lambda: 0.0)
    loader = FakeLoader(clock, 3)
    _train(run.watch(loader, "short"), loader, clock, epochs=1)
    assert run.close() == []
    assert "no loader ran past its warm-up (short)" in lines[-1]


def test_long_runs_keep_a_systematic_sample_of_their_intervals(monkeypatch):
    import loadtune.training_process.watch as watch_module

    monkeypatch.setattr(watch_module, "KEPT_BATCHES", 40)
    clock = FakeClock()
    loader = FakeLoader(clock, 5 + 4 * 40)
    watch, seen = _watch(clock, loader)
    _train(watch, loader, clock, epochs=1)
    watch.close()
    kept = watch.observed().windows
    assert sum(len(w) for w in kept) <= 40 and watch.kept.stride > 1
    assert len(seen) >= 40 and len(kept) < len(seen)


# --- real DataLoaders, scripts and ranks ---------------------------------------------------------

TRAIN = """
import sys, time, torch, loadtune
from torch.utils.data import DataLoader, Dataset

class Sleepy(Dataset):
    def __len__(self): return 480
    def __getitem__(self, i):
        time.sleep(0.001)
        return torch.full((16,), float(i)), i % 4

def main():
    loader = DataLoader(Sleepy(), batch_size=8, num_workers=2, shuffle=True, drop_last=True,
                        persistent_workers=True)
    model = torch.nn.Linear(16, 4)
    for epoch in range(3):
        for i, (x, y) in enumerate(WRAP):
            torch.nn.functional.cross_entropy(model(x), y).backward()
            time.sleep(0.004)
            if "raise" in sys.argv and epoch == 1 and i == 20:
                raise ValueError("the data went bad")
            if "exit" in sys.argv and epoch == 1 and i == 20:
                sys.exit(3)
    print("trained", len(sys.argv))

if __name__ == "__main__":
    main()
"""


def _script(tmp_path: Path, wrap: str) -> Path:
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(TRAIN).replace("WRAP", wrap))
    return path


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=240, cwd=cwd)


@pytest.mark.slow
def test_the_python_api_watches_a_real_dataloader_with_workers(tmp_path):
    script = _script(tmp_path, 'loadtune.watch(loader, out="run.csv", every_s=0.5, name="train")')
    done = _run([str(script)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "trained 1" in done.stdout
    (row,) = read_records(tmp_path / "run.csv")
    assert row.status == Status.WATCHED and row.trial == "train"
    settings = row.settings
    assert (settings.num_workers, settings.prefetch_factor, settings.persistent_workers, settings.batch_size) == \
        (2, 2, True, 8)
    assert 0 <= row.wait_ratio <= 1 and row.throughput > 0 and row.figures.step_ms > 0
    # the evidence a sweep's trial records, from the same instrumentation
    judged = row.assessment
    assert judged.fetch_ms > 0 and judged.fetch_cpu_share is not None and judged.handover_ms is not None
    assert row.resources.workers_cpu_util > 0 and row.resources.worker_pss_mb > 0 and judged.verdict and judged.advice
    assert row.measuring.run_epoch_batches == 60 and row.run.dataset_len == 480
    stored = read_samples(samples_file(tmp_path / "run.csv"))
    windows = [w for m in stored.trials["train"].measurements for w in m.windows]
    assert sum(len(w) for w in windows) == row.measuring.batches > 0
    assert sum(np.sum(w.samples) for w in windows) == 8 * row.measuring.batches
    kept = json.loads(loader_file(tmp_path / "run.csv").read_text())["train"]["loader_kwargs"]
    assert kept["shuffle"] is True and kept["drop_last"] is True
    assert "wait ratio" in done.stderr and "loadtune predict run.csv" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("how, status", [("raise", 1), ("exit", 3)])
def test_an_unchanged_script_that_fails_keeps_its_rows_and_its_exit_status(tmp_path, how, status):
    script = _script(tmp_path, "loader")
    done = _run(["-m", "loadtune", "watch", "--out", "run.csv", "--every", "0.2", str(script), how], tmp_path)
    assert done.returncode == status, done.stderr
    (row,) = read_records(tmp_path / "run.csv")
    assert row.status == Status.WATCHED and row.trial == "Sleepy" and row.throughput > 0
    if how == "raise":
        assert row.reason == "the script raised ValueError"
        assert "ValueError: the data went bad" in done.stderr
        assert "loadtune/training_process" not in done.stderr  # the script's traceback, as Python prints it
    else:
        assert row.reason == "the script exited with status 3"


@pytest.mark.slow
def test_torchrun_ranks_write_one_file_with_a_row_per_rank(tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text(textwrap.dedent("""
        import time, torch, torch.distributed as dist
        from torch.utils.data import DataLoader, Dataset, DistributedSampler

        class Sleepy(Dataset):
            def __len__(self): return 480
            def __getitem__(self, i):
                time.sleep(0.001)
                return torch.full((8,), float(i)), i % 2

        dist.init_process_group("gloo")
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
        data = Sleepy()
        sampler = DistributedSampler(data)
        for epoch in range(3):
            sampler.set_epoch(epoch)
            for x, y in DataLoader(data, batch_size=8, sampler=sampler, num_workers=1):
                torch.nn.functional.cross_entropy(model(x), y).backward()
        dist.destroy_process_group()
    """))
    done = _run(["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "loadtune",
                 "watch", "--out", "run.csv", "--every", "0.3", str(script)], tmp_path)
    assert done.returncode == 0, done.stderr
    rows = read_records(tmp_path / "run.csv")
    assert sorted((r.trial, r.measuring.dist_rank, r.measuring.ranks) for r in rows) == \
        [("Sleepy rank 0", 0, 2), ("Sleepy rank 1", 1, 2)]
    assert all(r.status == Status.WATCHED and r.throughput > 0 and r.assessment.fetch_ms for r in rows)
    assert not list(tmp_path.glob("run.rank*.csv"))
    stored = read_samples(samples_file(tmp_path / "run.csv"))
    assert set(stored.trials) == {"Sleepy rank 0", "Sleepy rank 1"}


def test_a_subclass_keeps_its_own_iter_and_is_watched_once_with_both_ways_in(tmp_path):
    """`loadtune watch SCRIPT` wraps DataLoader.__iter__; a loop that also wraps its loader in
    loadtune.watch gets the subclass's own iterator, watched once."""
    import torch
    from torch.utils.data import DataLoader

    from loadtune.training_process import hook
    from loadtune.training_process.watched import Watched

    class Doubled(DataLoader):
        def __iter__(self):
            for batch in super().__iter__():
                yield batch * 2

    loader = Doubled(torch.arange(64.0), batch_size=4)
    outer = RunWatch(tmp_path / "script.csv", 100.0, say=lambda line, level: None, sample_tree=False)
    inner = RunWatch(tmp_path / "api.csv", 100.0, say=lambda line, level: None, sample_tree=False)
    hook.watch_every_loader(outer)
    try:
        batches = list(Watched(loader, inner, inner.watch(loader, "api")))
    finally:
        hook.stop_watching()
    assert float(batches[0][1]) == 2.0  # the subclass's own __iter__ ran
    assert outer.loaders.watches == [] and inner.loaders.watches[0].tally.start.first_batch_s is not None
    assert inner.loaders.watches[0].tally.warmup.done == _MEASURE.warmup_batches
    outer.close()
    inner.close()
