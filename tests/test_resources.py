"""Resource figures: exact numbers on crafted samples, and short real runs of the sampler."""

from __future__ import annotations

import dataclasses
import functools
import multiprocessing
import os
import time
import traceback

import numpy as np
import pytest
import torch

from loadtune.decide.stats import summarize
from loadtune.measure.diagnose import diagnose
from loadtune.measure.loop import batch_bytes
from loadtune.measure.machine import usable_cores
from loadtune.measure.resource_figures import ResourceFigures, summarize_resources
from loadtune.measure.resources import (
    BYTES_PER_MB,
    MEMORY_USS,
    SHM_SAFETY_MARGIN,
    ProcessSample,
    ResourceSamples,
    Sample,
    TreeSampler,
    shm_fits,
    shm_need_mb,
)
from loadtune.record.measurement import CpuWindow, Measurement, TrialStart, Window
from tests.conftest import wait_until

MB = BYTES_PER_MB
ROOT = 100


def proc(pid, cpu, pss_mb=None, *, ppid=ROOT, children=0.0, threads=3, read_mb=None, started=1.0):
    return ProcessSample(pid=pid, ppid=ppid, started=started, cpu_s=cpu, children_cpu_s=children,
                         pss_bytes=None if pss_mb is None else int(pss_mb * MB), num_threads=threads,
                         read_bytes=None if read_mb is None else int(read_mb * MB))


def root(cpu, pss_mb=100, children=0.0, read_mb=0.0, threads=4):
    return proc(ROOT, cpu, pss_mb, ppid=1, children=children, read_mb=read_mb, threads=threads)


def samples(*taken, sampler_cpu_s=0.0, memory_metric="pss", io_metric="read_bytes"):
    return ResourceSamples(root_pid=ROOT, samples=tuple(taken), memory_metric=memory_metric, io_metric=io_metric,
                           interval_s=1.0, sampler_cpu_s=sampler_cpu_s)


# --- summarize_resources on crafted samples -----------------------------------------------


def test_steady_tree_exact_figures():
    r = samples(
        Sample(0.0, (root(1.0, read_mb=1),
                     proc(101, 0.0, 10, threads=3, read_mb=0), proc(102, 0.1, 10, threads=4, read_mb=0))),
        Sample(1.0, (root(1.2, read_mb=1),
                     proc(101, 0.8, 20, threads=3, read_mb=5), proc(102, 0.9, 15, threads=4, read_mb=2))),
        Sample(2.0, (root(1.4, read_mb=2),
                     proc(101, 1.6, 30, threads=3, read_mb=9), proc(102, 1.7, 20, threads=4, read_mb=3))),
    )
    f = summarize_resources(r, usable_cores=2)
    assert f.cpu.wall_s == 2.0
    assert f.cpu.main_cpu_s == pytest.approx(0.4)
    assert f.cpu.workers_cpu_s == pytest.approx(3.2)
    assert f.cpu.cpu_util == pytest.approx(3.6 / 2 / 2)
    assert f.cpu.main_cpu_util == pytest.approx(0.1)
    assert f.cpu.workers_cpu_util == pytest.approx(0.8)
    assert f.memory.peak_pss_mb == pytest.approx(150)
    assert f.memory.pss_growth_mb == pytest.approx(30)
    assert f.memory.worker_pss_mb == pytest.approx(25)
    assert f.memory.worker_pss_growth_mb == pytest.approx(15)
    assert f.read_mb == pytest.approx(1 + 9 + 3)
    assert f.threads_per_worker == pytest.approx(3.5)
    assert f.workers == 2 and f.peak_workers == 2
    assert f.memory.memory_metric == "pss" and f.io_metric == "read_bytes"
    assert f.sampler_load == 0.0


def test_the_cpu_columns_are_the_windows_not_the_samplers_span():
    """The sampler's span also holds idle moments around the counted window (the warm-up's end,
    the teardown): over it the same work reads less busy. A trial's CPU columns (and its verdict)
    take the figures read at the window's edges, inside the trial."""
    span = samples(Sample(0.0, (root(1.0), proc(101, 0.0), proc(102, 0.0))),
                   Sample(2.0, (root(1.1), proc(101, 0.9), proc(102, 0.9))))  # 1.9 CPU-s over 2 s: 0.475 busy
    n = 4
    window = Window(wait_s=(0.2,) * n, h2d_s=(0.0,) * n, step_s=(0.05,) * n, samples=(8,) * n,
                    epoch_start=(False,) * n, cpu=CpuWindow(wall_s=1.0, main_cpu_s=0.05, workers_cpu_s=1.8))
    measured = Measurement(TrialStart(0.1), (window,), resources=(span,))
    columns = diagnose("baseline", {"num_workers": 2}, measured, summarize(measured), usable_cores=2).columns
    assert columns["cpu_util"] == pytest.approx(0.925)
    assert (columns["main_cpu_util"], columns["workers_cpu_util"]) == (pytest.approx(0.025), pytest.approx(0.9))
    alone = Measurement(TrialStart(0.1), (dataclasses.replace(window, cpu=None),), resources=(span,))
    assert diagnose("baseline", {"num_workers": 2}, alone, summarize(alone), 2).columns["cpu_util"] == \
        pytest.approx(0.475), "without the window's readings: the sampler's"


def test_worker_reaped_between_samples_adds_only_its_unseen_cpu_and_reads():
    # 101 used 0.5 s before the window and 1.0 s in all by t=1; it then exits with 1.3 s and
    # 7 MB read, and the root reaps it: the root's children counters jump by its whole life.
    # 103 starts after t=1 and is seen at t=2 with 0.2 s.
    r = samples(
        Sample(0.0, (root(1.0, read_mb=10), proc(101, 0.5, 10, read_mb=2))),
        Sample(1.0, (root(1.0, read_mb=10), proc(101, 1.0, 10, read_mb=6))),
        Sample(2.0, (root(1.0, children=1.3, read_mb=10 + 7), proc(103, 0.2, 10, read_mb=1))),
    )
    f = summarize_resources(r, usable_cores=1)
    assert f.cpu.main_cpu_s == pytest.approx(0.0)
    assert f.cpu.workers_cpu_s == pytest.approx((1.0 - 0.5) + 0.3 + 0.2)
    assert f.read_mb == pytest.approx((6 - 2) + 1 + 1)  # 7 MB in all for 101, 2 of them before the window
    assert f.workers == 2 and f.peak_workers == 1
    assert f.memory.worker_pss_growth_mb == pytest.approx(0.0)  # 103, seen once, has no growth to report


def test_exited_worker_not_yet_reaped_keeps_its_last_cpu_until_reaped():
    first = Sample(0.0, (root(1.0), proc(101, 0.5, 10)))
    seen = Sample(1.0, (root(1.0), proc(101, 1.0, 10)))
    gone = Sample(2.0, (root(1.0),))
    reaped = Sample(3.0, (root(1.0, children=1.3),))
    assert summarize_resources(samples(first, seen, gone), 1).cpu.workers_cpu_s == pytest.approx(0.5)
    assert summarize_resources(samples(first, seen, gone, reaped), 1).cpu.workers_cpu_s == pytest.approx(0.8)


def test_a_zombie_counter_read_lower_changes_nothing():
    r = samples(
        Sample(0.0, (root(1.0), proc(101, 0.5, 10))),
        Sample(1.0, (root(1.0), proc(101, 1.0, 10))),
        Sample(2.0, (root(1.0), proc(101, 0.0, None, threads=None))),  # a zombie read as 0
        Sample(3.0, (root(1.0, children=1.1),)),
    )
    f = summarize_resources(r, 1)
    assert f.cpu.workers_cpu_s == pytest.approx(0.5 + 0.1)
    assert f.threads_per_worker == pytest.approx(3.0)
    assert f.peak_workers == 1


def test_grandchild_reaped_by_a_worker():
    r = samples(
        Sample(0.0, (root(1.0), proc(101, 0.0, 10), proc(201, 0.0, 5, ppid=101))),
        Sample(1.0, (root(1.0), proc(101, 0.2, 10), proc(201, 0.4, 5, ppid=101))),
        Sample(2.0, (root(1.0), proc(101, 0.3, 10, children=0.5))),
    )
    assert summarize_resources(r, 1).cpu.workers_cpu_s == pytest.approx(0.3 + 0.5)


def test_worker_and_its_child_both_reaped_in_one_interval():
    r = samples(
        Sample(0.0, (root(1.0), proc(101, 0.0, 10), proc(201, 0.0, 5, ppid=101))),
        Sample(1.0, (root(1.0), proc(101, 0.2, 10), proc(201, 0.4, 5, ppid=101))),
        # 201 exits with 0.5 s, 101 reaps it and exits with 0.3 s of its own; the root reaps 101.
        Sample(2.0, (root(1.0, children=0.3 + 0.5),)),
    )
    assert summarize_resources(r, 1).cpu.workers_cpu_s == pytest.approx(0.8)


def test_reused_pid_is_another_process():
    r = samples(
        Sample(0.0, (root(1.0), proc(101, 2.0, 10, started=1.0))),
        Sample(1.0, (root(1.0, children=2.0), proc(101, 0.4, 10, started=5.0))),
    )
    f = summarize_resources(r, 1)
    assert f.cpu.workers_cpu_s == pytest.approx(0.4)
    assert f.workers == 2


def test_sampler_cpu_is_taken_off_the_main_process():
    r = samples(Sample(0.0, (root(1.0),)), Sample(2.0, (root(1.5),)), sampler_cpu_s=0.1)
    f = summarize_resources(r, 2)
    assert f.cpu.main_cpu_s == pytest.approx(0.4)
    assert f.cpu.main_cpu_util == pytest.approx(0.4 / 2 / 2)
    assert f.sampler_load == pytest.approx(0.05)
    assert f.memory.worker_pss_mb is None and f.memory.worker_pss_growth_mb is None and f.threads_per_worker is None
    assert f.workers == 0


def test_memory_only_from_samples_that_read_it():
    r = samples(
        Sample(0.0, (root(1.0, pss_mb=100), proc(101, 0.0, 10))),
        Sample(1.0, (root(1.0, pss_mb=None), proc(101, 0.0, None)), memory=False),
        Sample(2.0, (root(1.0, pss_mb=100), proc(101, 0.0, 50))),
        Sample(3.0, (root(1.0, pss_mb=None), proc(101, 0.0, None)), memory=False),
        Sample(4.0, (root(1.0, pss_mb=100), proc(101, 0.0, 30))),
        memory_metric=MEMORY_USS,
    )
    f = summarize_resources(r, 1)
    assert f.memory.peak_pss_mb == pytest.approx(150)
    assert f.memory.pss_growth_mb == pytest.approx(20)
    assert f.memory.worker_pss_mb == pytest.approx(30)
    assert f.memory.worker_pss_growth_mb == pytest.approx(20)
    assert f.memory.memory_metric == "uss"


def test_growth_leaves_out_file_backed_pages():
    # Another process maps torch's libraries meanwhile: the root's file-backed share halves.
    def with_file(p, file_mb):
        return ProcessSample(**{**p.__dict__, "pss_file_bytes": int(file_mb * MB)})

    r = samples(
        Sample(0.0, (with_file(root(1.0, pss_mb=300), 200), with_file(proc(101, 0.0, 50), 20))),
        Sample(1.0, (with_file(root(1.0, pss_mb=210), 100), with_file(proc(101, 0.0, 90), 20))),
    )
    f = summarize_resources(r, 1)
    assert f.memory.peak_pss_mb == pytest.approx(350)  # totals
    assert f.memory.worker_pss_mb == pytest.approx(90)
    assert f.memory.pss_growth_mb == pytest.approx((110 + 70) - (100 + 30))  # without file-backed pages
    assert f.memory.worker_pss_growth_mb == pytest.approx(40)


def test_reads_unavailable():
    taken = (Sample(0.0, (root(1.0, read_mb=None),)), Sample(1.0, (root(1.0, read_mb=None),)))
    assert summarize_resources(samples(*taken), 1).read_mb is None
    assert summarize_resources(samples(Sample(0.0, (root(1.0),)), Sample(1.0, (root(1.0),)), io_metric=None),
                               1).read_mb is None


def test_too_few_samples_refused():
    with pytest.raises(ValueError):
        summarize_resources(samples(Sample(0.0, (root(1.0),))), 1)
    with pytest.raises(ValueError):
        summarize_resources(samples(Sample(0.0, (root(1.0),)), Sample(1.0, (root(1.0),))), 0)


# --- batches and /dev/shm -----------------------------------------------------------------


def test_batch_bytes_nested():
    batch = {
        "image": torch.zeros(4, 3, 8, 8),  # 4*3*8*8*4 = 3072
        "meta": [torch.zeros(4, dtype=torch.int64), ("name", np.zeros((2, 5), dtype=np.float16))],  # 32 + 20
        "label": 3,
    }
    assert batch_bytes(batch) == 3072 + 32 + 20
    assert batch_bytes((torch.zeros(10, dtype=torch.uint8), [])) == 10
    assert batch_bytes(["a", 1, None]) == 0


def test_shm_need_mb():
    ten_mb = 10 * MB
    assert shm_need_mb(ten_mb, 4, 2) == pytest.approx(10 * 4 * 3)
    assert shm_need_mb(ten_mb, 4, None) == pytest.approx(10 * 4 * 3)  # DataLoader's default prefetch
    assert shm_need_mb(ten_mb, 2, 8) == pytest.approx(10 * 2 * 9)
    assert shm_need_mb(ten_mb, 0, None) == 0.0


def test_shm_fits_against_free_space():
    docker_default_mb = 64.0
    need = shm_need_mb(19 * MB, 4, 2)  # 32 × 3×224×224 float32 ≈ 19 MB per batch: 228 MB
    assert not shm_fits(need, docker_default_mb)
    assert shm_fits(need, 8 * 1024.0)
    assert shm_fits(40.0, 40.0 * SHM_SAFETY_MARGIN)
    assert not shm_fits(40.0, 40.0 * SHM_SAFETY_MARGIN - 0.01)
    assert shm_fits(0.0, 0.0)


# --- the sampler, for real ----------------------------------------------------------------


def isolated(test):
    """Run a sampler test in a freshly forked child of pytest: the sampled tree is then only
    what the test starts, not processes earlier tests left with pytest (a forkserver, say)."""

    @functools.wraps(test)
    def wrapper(*args, **kwargs):
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: run the test, report, and leave without pytest's cleanup
            os.close(read_fd)
            try:
                test(*args, **kwargs)
                message = b""
            except BaseException:  # noqa: BLE001 - the report goes back to the parent
                message = traceback.format_exc().encode()
            os.write(write_fd, message or b"ok")
            os._exit(0)
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as report:
            text = report.read().decode()
        os.waitpid(pid, 0)
        assert text == "ok", text

    return wrapper


def _burn(cpu_s: float) -> None:
    end = time.process_time() + cpu_s
    while time.process_time() < end:
        sum(range(1000))


def _burner(go, cpu_s: float, burned, release, then_cpu_s: float) -> None:
    go.wait(60)
    _burn(cpu_s)
    burned.set()
    release.wait(60)
    _burn(then_cpu_s)


class _Burners:
    """`n` forked processes that, once `go` is set, burn `cpu_s` of CPU, set their `burned`
    event, wait (idle) for `release`, burn `then_cpu_s` more and exit."""

    def __init__(self, n: int, cpu_s: float, then_cpu_s: float = 0.0, go: bool = True) -> None:
        ctx = multiprocessing.get_context("fork")  # fork: no helper process for the events
        self.go, self.release = ctx.Event(), ctx.Event()
        self.burned = [ctx.Event() for _ in range(n)]
        if go:
            self.go.set()
        self.procs = [ctx.Process(target=_burner, args=(self.go, cpu_s, burned, self.release, then_cpu_s))
                      for burned in self.burned]
        for proc in self.procs:
            proc.start()
        self.pids = {proc.pid for proc in self.procs}

    def wait_burned(self) -> None:
        assert all(burned.wait(30) for burned in self.burned), "the burners did not burn their CPU in 30 s"

    def finish(self) -> None:
        """Let them go on to the end, and reap them."""
        self.go.set()
        self.release.set()
        for proc in self.procs:
            proc.join(timeout=30)
        assert [proc.exitcode for proc in self.procs] == [0] * len(self.procs)


def samples_so_far(sampler: TreeSampler) -> tuple[Sample, ...]:
    """The samples a running sampler's thread has taken (they are handed out at stop())."""
    return tuple(sampler._samples)


def pids_in(sample: Sample) -> set[int]:
    return {p.pid for p in sample.processes}


@isolated
def test_sampler_life_cycle_and_short_window():
    sampler = TreeSampler(os.getpid())
    with pytest.raises(RuntimeError):
        sampler.stop()
    with sampler:
        pass
    r = sampler.result
    assert r is not None and sampler.stop() is r
    assert len(r.samples) >= 2 and r.samples[-1].memory
    assert not r.samples[0].memory  # start() leaves the slow memory reading to the thread
    assert r.samples[0].processes[0].pid == os.getpid()
    assert r.samples[-1].processes[0].pss_bytes > 0
    if os.path.exists("/proc/self/smaps_rollup"):
        assert r.samples[-1].processes[0].pss_file_bytes is not None
    with pytest.raises(RuntimeError):
        sampler.start()
    with pytest.raises(ValueError):
        TreeSampler(os.getpid(), interval_s=0)


def _burners_that_exit() -> tuple[ResourceSamples, ResourceFigures]:
    """A window in which two workers burn 0.4 s of CPU each and exit, reaped before its end."""
    with TreeSampler(os.getpid(), interval_s=0.1) as sampler:
        burners = _Burners(2, cpu_s=0.2, then_cpu_s=0.2)
        burners.wait_burned()
        # The thread sees both alive, half-way through their CPU; the other half they burn
        # after that, and it is only seen in the root's counters once they are reaped.
        assert wait_until(lambda: any(burners.pids <= pids_in(s) for s in samples_so_far(sampler)))
        burners.finish()
    r = sampler.result
    return r, summarize_resources(r, usable_cores=usable_cores())


@pytest.mark.slow  # two processes burning CPU
@isolated
def test_workers_that_burn_cpu_and_exit_are_counted():
    r, f = _burners_that_exit()
    assert f.cpu.cpu_util > 0
    assert f.cpu.workers_cpu_util > f.cpu.main_cpu_util
    assert f.workers == 2
    assert pids_in(r.samples[-1]) == {os.getpid()}  # reaped before the last sample
    # All of each burner's CPU counts: what was seen while it ran, and the rest when it was reaped.
    assert f.cpu.workers_cpu_s >= 2 * 0.4 - 0.05


@pytest.mark.slow  # two processes burning CPU
@pytest.mark.serial  # bounds on measured CPU: other tests' load moves them
@isolated
def test_exited_workers_cpu_is_not_overcounted_and_the_sampler_is_light():
    _, f = _burners_that_exit()
    assert f.cpu.workers_cpu_s < 2 * 0.4 + 0.3
    assert f.sampler_load < 0.25


@pytest.mark.slow  # two processes burning CPU
@isolated
def test_workers_alive_at_stop():
    burners = _Burners(2, cpu_s=0.3, go=False)
    try:
        with TreeSampler(os.getpid(), interval_s=0.1) as sampler:
            burners.go.set()  # after the first sample: all their burning is inside the window
            burners.wait_burned()
        r = sampler.result
        f = summarize_resources(r, usable_cores=usable_cores())
    finally:
        burners.finish()
    assert burners.pids <= pids_in(r.samples[-1])  # alive (waiting) at the last sample
    assert f.workers == 2 and f.peak_workers == 2
    assert f.cpu.workers_cpu_s >= 2 * 0.3 - 0.05
    assert f.cpu.workers_cpu_util > f.cpu.main_cpu_util
    assert f.threads_per_worker is not None and f.threads_per_worker >= 1
    assert f.memory.worker_pss_mb is not None and f.memory.worker_pss_mb > 0


class _Cpu(torch.utils.data.Dataset):
    """Each sample costs 2 ms of CPU."""

    def __len__(self):
        return 100

    def __getitem__(self, i):
        _burn(0.002)
        return i


@pytest.mark.slow
@isolated
def test_dataloader_workers_restarted_each_epoch_keep_their_cpu():
    loader = torch.utils.data.DataLoader(_Cpu(), batch_size=10, num_workers=2, persistent_workers=False)
    with TreeSampler(os.getpid(), interval_s=0.1) as sampler:
        for _ in range(2):
            for _ in loader:
                pass
    f = summarize_resources(sampler.result, usable_cores=usable_cores())
    assert f.workers == 4  # two workers per epoch, started again each epoch
    assert f.cpu.workers_cpu_s >= 2 * 100 * 0.002 * 0.9


class _Slices(torch.utils.data.Dataset):
    """Index i reads SLICE consecutive elements of `items`, like a dataset reading its file list."""

    SLICE = 500

    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items) // self.SLICE

    def __getitem__(self, i):
        return int(sum(self.items[i * self.SLICE:(i + 1) * self.SLICE]))


def _growth_reading(items) -> tuple[float, float]:
    loader = torch.utils.data.DataLoader(_Slices(items), batch_size=25, num_workers=2,
                                         persistent_workers=True, multiprocessing_context="fork")
    it = iter(loader)
    next(it)  # the workers are up
    with TreeSampler(os.getpid()) as sampler:
        for _ in it:
            pass
    del it, loader
    f = summarize_resources(sampler.result, usable_cores=usable_cores())
    assert f.workers == 2
    return f.memory.pss_growth_mb, f.memory.worker_pss_growth_mb


@pytest.mark.slow
@isolated
def test_python_objects_read_in_workers_are_copied_numpy_is_not():
    n = 2_500_000
    as_list = list(range(10**6, 10**6 + n))  # 2.5 M int objects (~70 MB), each with a refcount
    list_tree, list_worker = _growth_reading(as_list)
    del as_list
    as_array = np.arange(10**6, 10**6 + n, dtype=np.int64)
    array_tree, array_worker = _growth_reading(as_array)
    assert list_tree > 20, (list_tree, array_tree)
    assert list_worker > 10, (list_worker, array_worker)
    assert array_tree < list_tree / 4, (list_tree, array_tree)
    assert array_worker < list_worker / 4, (list_worker, array_worker)


@isolated
def test_memory_is_read_within_its_budget():
    with TreeSampler(os.getpid(), interval_s=0.05) as sampler:
        # About a second of sampling: long enough for the memory readings (the thread's first
        # and stop()'s, and what the budget allows in between) to be a small load.
        assert wait_until(lambda: len(samples_so_far(sampler)) >= 20, timeout_s=20)
    r = sampler.result
    memory = [s.memory for s in r.samples]
    assert len(r.samples) >= 21  # and the last one, stop()'s
    assert not memory[0] and memory[1] and memory[-1]  # the thread reads memory at once, then by budget
    assert sum(memory) < len(memory) / 2
    assert all(p.pss_bytes is None for s in r.samples if not s.memory for p in s.processes)
    assert [s.t_s for s in r.samples] == sorted(s.t_s for s in r.samples)
    # The sampler's own share of a core is reported (benchmarks/overhead.py measures it, 2.8% in
    # a sweep); over a one-second window its two unbudgeted readings make it a noisy figure, so
    # only its range is checked.
    assert 0 < summarize_resources(r, 1).sampler_load < 1


@pytest.mark.slow  # the sampled root is a child process
def test_a_root_that_exits_stops_the_sampling_quietly():
    ctx = multiprocessing.get_context("fork")
    release = ctx.Event()
    child = ctx.Process(target=release.wait, args=(60,))
    child.start()
    try:
        sampler = TreeSampler(child.pid, interval_s=0.05).start()
    finally:
        release.set()
        child.join(timeout=30)
    assert child.exitcode == 0
    # Its thread ends by itself once the root is gone, without stop().
    assert wait_until(lambda: not sampler._thread.is_alive(), timeout_s=10)
    r = sampler.stop()
    assert 1 <= len(r.samples)
    assert all(s.processes[0].pid == child.pid for s in r.samples)
