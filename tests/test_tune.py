"""loadtune.tune: the search over the real loop's batches (a fake clock, exact decisions), and
real DataLoaders switched mid-epoch: each sample handed once, in the sampler's order; a setting
that fails falls back and the run goes on; the rows it leaves."""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

import loadtune
from loadtune.asked.config import MeasureSpec
from loadtune.core.errors import LoadtuneError
from loadtune.decide.selection import waiting_gain
from loadtune.measure.loop import WarmUp
from loadtune.record.record import read_records
from loadtune.training_process import tune as tune_module, watch as watch_module
from loadtune.training_process.tuner import WINDOW_MIN_BATCHES, Limits, Outside, Tuner

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")

START = {"num_workers": 0, "prefetch_factor": None, "persistent_workers": False, "pin_memory": False}


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make_tuner(clock: FakeClock, workers: int = 4, budget_s: float = 100.0, room: str = "",
               tune: tuple[str, ...] = ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory"),
               accelerator: bool = False, outside: Outside | None = None) -> Tuner:
    limits = Limits(tune, workers, accelerator, budget_s, window_s=0.5)
    return Tuner(START, limits, clock, lambda s: WarmUp(clock, base=2, extra_batches=0, extra_max_s=0.0),
                 lambda added: room, outside)


def run_setting(tuner: Tuner, clock: FakeClock, wait_s: float, step_s: float = 0.01, samples: int = 10) -> int:
    """Feed the current setting's batches until the tuner switches; how many it took."""
    for n in range(1, 1000):
        clock.now += wait_s + step_s
        if tuner.add(wait_s, step_s, samples):
            return n
    raise AssertionError("no switch")


def test_a_setting_is_measured_after_its_warm_up_over_a_window_of_batches_and_seconds():
    clock = FakeClock()
    tuner = make_tuner(clock)
    # 2 warm-up batches, then WINDOW_MIN_BATCHES (12) counted: 12 * 0.05 s = 0.6 s >= window_s
    assert run_setting(tuner, clock, wait_s=0.04) == 2 + WINDOW_MIN_BATCHES
    first = tuner.tried[0]
    assert first.settings == START and first.samples_per_s == pytest.approx(10 / 0.05)
    assert first.wait_ratio == pytest.approx(0.8) and len(first.blocks) == 3 and first.relative_se == 0.0
    assert tuner.current["num_workers"] == 1  # the next change: one worker


def test_workers_double_while_they_pay_then_prefetch_then_it_settles_with_persistence():
    clock = FakeClock()
    tuner = make_tuner(clock)
    for wait in (0.04, 0.02, 0.005):  # 0 workers, 1 worker, 2 workers: each faster by far more than 3%
        run_setting(tuner, clock, wait)
    assert tuner.current["num_workers"] == 4
    run_setting(tuner, clock, 0.0049)  # 4 workers: 0.7% faster than 2, within the zone: not kept
    assert tuner.kept is not None and tuner.kept.settings["num_workers"] == 2
    assert tuner.current["num_workers"] == 3  # halfway to the 4 that did not pay
    run_setting(tuner, clock, 0.005)  # 3 workers: no faster
    assert tuner.current == {**tuner.kept.settings, "prefetch_factor": 4}  # none left between 2 and 3
    run_setting(tuner, clock, 0.005)  # a deeper prefetch: no faster
    assert tuner.settled and tuner.current == {"num_workers": 2, "prefetch_factor": 2, "persistent_workers": True,
                                               "pin_memory": False}
    assert [t.settings["num_workers"] for t in tuner.tried] == [0, 1, 2, 4, 3, 2]
    # Every setting with workers was tried as the kept one runs: persistent.
    assert all(t.settings["persistent_workers"] for t in tuner.tried if t.settings["num_workers"])


def test_a_start_with_workers_kept_as_it_is_is_made_persistent():
    clock = FakeClock()
    start = {"num_workers": 2, "prefetch_factor": 2, "persistent_workers": False, "pin_memory": False}
    tuner = Tuner(start, Limits(("num_workers", "prefetch_factor", "persistent_workers", "pin_memory"), 4, False,
                                60.0, 0.5), clock, lambda s: WarmUp(clock, base=1, extra_batches=0, extra_max_s=0.0))
    run_setting(tuner, clock, wait_s=0.0002, step_s=0.05)  # waits 0.4%: nothing to gain, the start is kept
    assert tuner.settled and tuner.current == {**start, "persistent_workers": True}
    assert any("persistent_workers=True" in n for n in tuner.notes)


def test_from_a_start_with_workers_not_kept_up_every_setting_proposed_is_tried_persistent():
    clock = FakeClock()
    start = {"num_workers": 2, "prefetch_factor": 2, "persistent_workers": False, "pin_memory": False}
    limits = Limits(("num_workers", "prefetch_factor", "persistent_workers", "pin_memory"), 4, True, 60.0, 0.5)
    tuner = Tuner(start, limits, clock, lambda s: WarmUp(clock, base=1, extra_batches=0, extra_max_s=0.0))
    run_setting(tuner, clock, 0.02)  # the start, measured as the loader has it
    assert tuner.current == {**start, "num_workers": 4, "persistent_workers": True}
    run_setting(tuner, clock, 0.02)  # 4 workers do not pay: 3, halfway, next
    assert tuner.current == {**start, "num_workers": 3, "persistent_workers": True}
    run_setting(tuner, clock, 0.02)  # nor do 3: the start is kept; a deeper prefetch next
    assert tuner.current == {**start, "prefetch_factor": 4, "persistent_workers": True}
    run_setting(tuner, clock, 0.02)  # no faster: pinned memory next (batches go to an accelerator)
    assert tuner.current == {**start, "pin_memory": True, "persistent_workers": True}
    assert tuner.tried[0].settings == start


def test_where_persistence_may_not_change_the_settings_tried_keep_the_loader_s():
    clock = FakeClock()
    tuner = make_tuner(clock, tune=("num_workers",))
    run_setting(tuner, clock, 0.04)
    assert tuner.current["num_workers"] == 1 and tuner.current["persistent_workers"] is False


def test_a_doubling_past_the_best_is_followed_by_the_workers_halfway():
    clock = FakeClock()
    tuner = make_tuner(clock, workers=8)
    for wait in (0.04, 0.02, 0.01):  # 0, 1, 2 workers: each faster
        run_setting(tuner, clock, wait)
    run_setting(tuner, clock, 0.02)  # 4 workers: slower than 2
    assert tuner.current["num_workers"] == 3
    run_setting(tuner, clock, 0.002)  # 3 workers: faster than 2: kept, and nothing is left between 3 and 4
    assert tuner.kept is not None and tuner.kept.settings["num_workers"] == 3
    assert tuner.current["num_workers"] == 3 and tuner.current["prefetch_factor"] == 4


def test_the_model_s_picks_are_tried_first_each_whatever_the_one_before_showed():
    clock = FakeClock()
    tuner = make_tuner(clock, workers=2)
    run_setting(tuner, clock, 0.04)  # the start: 0 workers
    tuner.suggest([{"num_workers": 2, "prefetch_factor": 1, "persistent_workers": True},
                   {"num_workers": 8, "prefetch_factor": 2},  # beyond the cores: left out
                   {"num_workers": 2, "prefetch_factor": 1, "persistent_workers": False},  # the same, persistence aside
                   {"num_workers": 1, "prefetch_factor": 2}])
    assert [s["num_workers"] for s in tuner.pending] == [2, 1]
    run_setting(tuner, clock, 0.041)  # the model's first pick: no faster
    assert tuner.current["num_workers"] == 1  # its second pick is tried all the same
    run_setting(tuner, clock, 0.01)  # faster: kept; then one change at a time from it
    assert tuner.kept is not None and tuner.kept.settings["num_workers"] == 1
    # two workers were measured (the model's first pick, its prefetch raised to 2): next, a deeper prefetch
    assert tuner.current["num_workers"] == 1 and tuner.current["prefetch_factor"] == 4
    assert [t.settings["prefetch_factor"] for t in tuner.tried] == [None, 2, 2], "never below DataLoader's 2"


def test_a_loop_that_barely_waits_settles_on_its_own_settings():
    clock = FakeClock()
    tuner = make_tuner(clock)
    run_setting(tuner, clock, wait_s=0.0002, step_s=0.05)  # waits 0.4%: at most 0.4% to gain
    assert tuner.settled and tuner.current == START and len(tuner.tried) == 1
    assert waiting_gain(0.25) == pytest.approx(1 / 3) and waiting_gain(1.0) == float("inf")


def test_the_budget_ends_the_search_with_the_best_so_far():
    clock = FakeClock()
    tuner = make_tuner(clock, budget_s=1.0)
    run_setting(tuner, clock, 0.04)  # 0.7 s
    run_setting(tuner, clock, 0.02)  # 1.1 s: past the budget
    assert tuner.settled and tuner.current["num_workers"] == 1
    assert any("budget" in n for n in tuner.notes)


def test_only_the_settings_allowed_change_and_workers_stop_at_the_most_tried():
    clock = FakeClock()
    tuner = make_tuner(clock, workers=1, tune=("num_workers",))
    run_setting(tuner, clock, 0.04)
    run_setting(tuner, clock, 0.02)  # one worker: the cores' limit; prefetch and persistence not allowed
    assert tuner.settled and tuner.current == {**START, "num_workers": 1, "prefetch_factor": 2}


def test_workers_that_would_not_fit_in_memory_are_not_tried():
    clock = FakeClock()
    tuner = make_tuner(clock, room="no room")
    run_setting(tuner, clock, 0.04)
    assert tuner.settled and tuner.current == START
    assert tuner.notes == ["num_workers=1 not tried: no room"]


def test_a_setting_that_fails_falls_back_to_the_one_kept():
    clock = FakeClock()
    tuner = make_tuner(clock)
    run_setting(tuner, clock, 0.04)
    assert tuner.failed("RuntimeError: worker died")
    assert tuner.settled and tuner.current == START and tuner.tried[-1].failed == "RuntimeError: worker died"
    assert not tuner.failed("again")  # the kept setting failing is the loop's own error


class Neighbour:
    """What other processes use during each window, in the order the windows end (then nothing);
    counts the windows it was asked about."""

    def __init__(self, *shares: float | None) -> None:
        self.shares, self.opened = list(shares), 0

    def __call__(self) -> Callable[[], float | None]:
        self.opened += 1
        return lambda: self.shares.pop(0) if self.shares else 0.0


def test_a_window_disturbed_by_other_processes_is_measured_again_and_the_search_says_so():
    clock = FakeClock()
    neighbour = Neighbour(0.6)  # the start's first window: other processes took 60% of the cores
    tuner = make_tuner(clock, tune=("num_workers",), outside=neighbour)
    # 2 warm-up batches, a disturbed window of 12, then the window measured again: 12 more
    assert run_setting(tuner, clock, wait_s=0.04) == 2 + 2 * WINDOW_MIN_BATCHES
    assert neighbour.opened == 2 and tuner.disturbed == [0.6] and len(tuner.tried) == 1
    run_setting(tuner, clock, wait_s=0.0002, step_s=0.05)  # one worker: nothing left to gain
    assert tuner.settled and tuner.notes == [
        "1 window(s) measured again: other processes used up to 60% of the cores (more than 25%)"]


def test_a_window_is_measured_again_at_most_max_redone_times_and_a_quiet_or_unknown_one_never():
    from loadtune.core.kinds import MAX_REDONE

    clock = FakeClock()
    busy = Neighbour(*[0.9] * (MAX_REDONE + 1))
    tuner = make_tuner(clock, tune=("num_workers",), outside=busy)
    assert run_setting(tuner, clock, wait_s=0.04) == 2 + (MAX_REDONE + 1) * WINDOW_MIN_BATCHES
    assert tuner.disturbed == [0.9] * MAX_REDONE and tuner.tried[0].samples_per_s == pytest.approx(10 / 0.05)
    for neighbour in (Neighbour(0.25), Neighbour(None)):  # at the limit, or not known (a CPU quota)
        clock = FakeClock()
        tuner = make_tuner(clock, tune=("num_workers",), outside=neighbour)
        assert run_setting(tuner, clock, wait_s=0.04) == 2 + WINDOW_MIN_BATCHES and not tuner.disturbed


def test_what_other_processes_use_is_read_from_the_machine_s_count_less_the_tree_s():
    from loadtune.measure.cpu import cpu_outside_share, outside_since
    from loadtune.record.measurement import CpuWindow

    assert cpu_outside_share(CpuWindow(2.0, main_cpu_s=1.0, workers_cpu_s=1.5, machine_busy_s=3.5,
                                       machine_cpus=2), usable_cores=2) == pytest.approx(0.25)
    assert cpu_outside_share(CpuWindow(1.0, 1.0, 1.0, machine_busy_s=1.5, machine_cpus=2), 2) == 0.0
    assert cpu_outside_share(CpuWindow(1.0, 1.0, 1.0, machine_busy_s=None, machine_cpus=None), 2) is None
    share = outside_since(1.0)()  # a real reading: a share of the cores, or None under a quota
    assert share is None or share >= 0.0


# --- real DataLoaders ------------------------------------------------------------------------------


class Indices(Dataset):
    """Each sample is its index; a little CPU each, so workers pay."""

    def __init__(self, n: int = 600, fail_with_workers: int | None = None) -> None:
        self.n, self.fail_with_workers = n, fail_with_workers

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        info = get_worker_info()
        if self.fail_with_workers is not None and info is not None and info.num_workers >= self.fail_with_workers:
            raise ValueError(f"no sample with {info.num_workers} workers")
        end = time.perf_counter() + 0.0003
        while time.perf_counter() < end:
            pass
        return torch.tensor(i)


class Stream(IterableDataset):
    def __iter__(self):
        info = get_worker_info()
        ids = range(200) if info is None else range(info.id, 200, info.num_workers)
        return iter(torch.tensor(i) for i in ids)


def quick_patches(patch: Callable[[Any, str, Any], None]) -> None:
    """Short windows, 2 usable cores (so 6 workers at most) whatever this machine has, no window
    measured again for what other processes use, and every change kept, so a run switches at the
    same batches whatever the figures: 0, 1, 2, 4, 6 workers, then prefetch_factor 4 and 8, then
    the kept setting made persistent. `patch`: monkeypatch.setattr, or setattr in a process of its
    own (a rank of tests/test_tune_ranks.py)."""
    patch(tune_module, "MIN_WINDOW_S", 0.05)
    patch(tune_module, "WINDOWS_IN_BUDGET", 10**6)  # windows of 0.05 s, a budget never spent
    patch(tune_module, "TOLERANCE", -2.0)  # no loop waits so little that nothing can gain
    patch(Tuner, "zone", lambda self, a, b: -1.0)  # any change is faster by more than the zone
    patch(tune_module.Tuned, "_suggest", lambda self: None)  # the model's picks: see below
    patch(tune_module, "usable_cores", lambda: 2)
    patch(tune_module, "outside_since", lambda cores: lambda: None)  # a test beside this one redoes no window
    # one warm-up rule (watch.warm_up_rule) for the search and the rows: a batch
    patch(watch_module, "_MEASURE", MeasureSpec(warmup_batches=1, warmup_batches_per_worker=0))


@pytest.fixture
def quick(monkeypatch):
    """quick_patches for one test."""
    quick_patches(monkeypatch.setattr)


def epochs(tuned: Any, n: int) -> list[list[int]]:
    return [[int(x) for batch in tuned for x in batch.reshape(-1)] for _ in range(n)]


@pytest.mark.slow
def test_each_sample_is_handed_once_per_epoch_in_the_sampler_order_across_switches(tmp_path, quick, caplog):
    caplog.set_level(logging.INFO)
    loader = DataLoader(Indices(), batch_size=4)
    tuned = loadtune.tune(loader, out=tmp_path / "run.csv", budget_s=100, name="train")
    got = epochs(tuned, 3)
    rows = tuned.close()
    assert all(epoch == list(range(600)) for epoch in got)
    tried = [r for r in rows if r.tuned]
    # Persistence may change: each setting with workers is tried persistent, as the one kept runs.
    assert [r.trial for r in tried] == ["train: baseline"] + [
        f"train: {name}, persistent_workers=true" for name in (
            "num_workers=1", "num_workers=2", "num_workers=4", "num_workers=6", "num_workers=6, prefetch_factor=4",
            "num_workers=6, prefetch_factor=8")]
    assert sum(1 for r in rows if r.status == "watched") == 1
    assert "each sample once" in caplog.text and "keeps" in caplog.text


@pytest.mark.slow
def test_the_pipeline_model_fitted_to_the_start_names_what_to_try_first(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO)
    monkeypatch.setattr(tune_module, "MIN_WINDOW_S", 0.05)
    monkeypatch.setattr(tune_module, "WINDOWS_IN_BUDGET", 10**6)
    suggested: list = []
    monkeypatch.setattr(tune_module, "outside_since", lambda cores: lambda: None)  # the start's one window
    monkeypatch.setattr(Tuner, "suggest", lambda self, configs: suggested.extend(configs))
    tuned = loadtune.tune(DataLoader(Indices(300), batch_size=4), out=tmp_path / "run.csv", budget_s=100)
    got = epochs(tuned, 2)
    tuned.close()
    assert got == [list(range(300))] * 2
    assert suggested and all("num_workers" in s for s in suggested), "the model predicted its space"


@pytest.mark.slow
def test_a_shuffled_epoch_is_the_order_the_loader_would_draw(tmp_path, quick):
    generator, twin = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    loader = DataLoader(Indices(200), batch_size=5, shuffle=True, generator=generator)
    tuned = loadtune.tune(loader, out=tmp_path / "run.csv", budget_s=100)
    first, second = epochs(tuned, 2)
    tuned.close()
    expected = [i for b in torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(range(200), generator=twin),
                                                         5, False) for i in b]
    assert first == expected
    assert sorted(second) == list(range(200)) and second != first


@pytest.mark.slow
def test_a_setting_whose_workers_raise_falls_back_and_the_run_goes_on(tmp_path, quick, caplog):
    caplog.set_level(logging.INFO)
    loader = DataLoader(Indices(400, fail_with_workers=2), batch_size=4)
    tuned = loadtune.tune(loader, out=tmp_path / "run.csv", budget_s=100, tune=["num_workers"])
    got = epochs(tuned, 2)
    tuned.close()
    assert got == [list(range(400))] * 2
    assert "num_workers=2 failed (ValueError: no sample with 2 workers" in caplog.text
    assert "the run goes on" in caplog.text
    assert tuned.settings == {"num_workers": 1, "prefetch_factor": 2, "persistent_workers": False,
                              "pin_memory": False}


@pytest.mark.slow
def test_an_iterable_dataset_switches_at_epoch_ends(tmp_path, quick, caplog):
    caplog.set_level(logging.INFO)
    tuned = loadtune.tune(DataLoader(Stream(), batch_size=4), out=tmp_path / "run.csv", budget_s=100)
    got = epochs(tuned, 4)
    tuned.close()
    assert all(sorted(epoch) == list(range(200)) for epoch in got)
    assert "settings change at epoch ends" in caplog.text


@pytest.mark.slow
def test_the_loader_s_own_attributes_pass_through_and_the_rows_load(tmp_path, quick):
    loader = DataLoader(Indices(100), batch_size=10)
    tuned = loadtune.tune(loader, out=tmp_path / "run.csv", budget_s=100, name="train")
    assert len(tuned) == 10 and tuned.dataset is loader.dataset and tuned.batch_size == 10
    assert tuned.sampler is loader.sampler
    epochs(tuned, 2)
    tuned.close()
    rows = read_records(tuned.out)
    assert {r.status for r in rows} <= {"tuned", "watched"} and all(r.ran for r in rows)
    assert all((r.trial or "").startswith("train") for r in rows)


def test_what_tune_refuses_is_one_line_naming_it():
    with pytest.raises(LoadtuneError, match="not a DataLoader"):
        loadtune.tune([1, 2, 3])
    with pytest.raises(LoadtuneError, match="tune= may list .*not shuffle"):
        loadtune.tune(DataLoader(Indices(10)), tune=["shuffle"])
    with pytest.raises(LoadtuneError, match="budget_s"):
        loadtune.tune(DataLoader(Indices(10)), budget_s=0)


SCRIPT = '''
import sys, time, torch
from torch.utils.data import DataLoader, Dataset

class Indices(Dataset):
    def __len__(self):
        return 300
    def __getitem__(self, i):
        time.sleep(0.0005)
        return torch.tensor(i)

if __name__ == "__main__":
    loader = DataLoader(Indices(), batch_size=4)
    for epoch in range(int(sys.argv[1])):
        seen = [int(x) for batch in loader for x in batch]
        assert seen == list(range(300)), "each index once, in order"
    print("trained")
'''


@pytest.mark.slow
def test_watch_tune_tunes_an_unchanged_script(tmp_path):
    from tests.conftest import run_cli

    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = tmp_path / "run.csv"
    done = run_cli("watch", "--tune", "--out", str(out), str(script), "3", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "trained" in done.stdout
    assert "loadtune: tuning Indices from num_workers=0" in done.stderr
    rows = read_records(out)
    assert rows and all((r.trial or "").startswith("Indices") for r in rows)
    assert any(r.tuned for r in rows), "the start's setting, at least, was tried"
