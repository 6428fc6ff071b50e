"""The measured loop, driven by a fake clock and a fake loader: exact numbers."""

from __future__ import annotations

import pytest

from loadtune.decide.stats import ProcessNoise, summarize
from loadtune.measure.loop import EmptyLoaderError, batch_len, measure_loop


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeLoader:
    """`length` batches of `batch` samples per epoch; next() costs `fetch_s`, iter() `start_s`."""

    def __init__(self, clock: FakeClock, length: int, fetch_s: float, start_s: float = 0.0, batch: int = 4):
        self.clock, self.length, self.fetch_s, self.start_s, self.batch = clock, length, fetch_s, start_s, batch
        self.iterators = 0

    def __iter__(self):
        self.iterators += 1
        self.clock.advance(self.start_s)
        for _ in range(self.length):
            self.clock.advance(self.fetch_s)
            yield [0] * self.batch


def stepper(clock: FakeClock, step_s: float):
    def step(batch):
        clock.advance(step_s)

    return step


def test_exact_wait_step_and_first_batch():
    clock = FakeClock()
    loader = FakeLoader(clock, length=1000, fetch_s=0.010, start_s=0.5)
    m = measure_loop(loader, stepper(clock, 0.030), warmup_batches=3, batches=5, repeats=2, clock=clock)
    assert m.start.first_batch_s == pytest.approx(0.510)
    assert len(m.windows) == 2
    for window in m.windows:
        assert window.wait_s == pytest.approx((0.010,) * 5)
        assert window.step_s == pytest.approx((0.030,) * 5)
        assert window.h2d_s == (0.0,) * 5
        assert window.samples == (4,) * 5
        assert window.epoch_start == (False,) * 5
    stats = summarize(m, noise=ProcessNoise(0.0, 0.0, 10), drift=None)  # processes that never differ: no width
    assert stats.wait_ratio.mean == pytest.approx(0.25)
    assert stats.throughput.mean == pytest.approx(4 / 0.040)
    assert stats.wait_ratio.lo == pytest.approx(0.25) and stats.wait_ratio.hi == pytest.approx(0.25)
    assert stats.times.first_batch_s == pytest.approx(0.510)
    assert stats.times.wait_ms == pytest.approx(10.0)
    assert stats.times.step_ms == pytest.approx(30.0)


def test_transfer_time_is_h2d_and_counts_as_waiting():
    clock = FakeClock()
    loader = FakeLoader(clock, length=100, fetch_s=0.010)

    def transfer(batch):
        clock.advance(0.005)
        return batch

    m = measure_loop(loader, stepper(clock, 0.035), warmup_batches=1, batches=4, repeats=1,
                     transfer=transfer, clock=clock)
    assert m.windows[0].h2d_s == pytest.approx((0.005,) * 4)
    stats = summarize(m)
    assert stats.wait_ratio.mean == pytest.approx(0.015 / 0.050)
    assert stats.times.h2d_ms == pytest.approx(5.0)


def test_epoch_batches_starts_new_iterators_and_counts_their_start():
    clock = FakeClock()
    loader = FakeLoader(clock, length=1000, fetch_s=0.010, start_s=0.2)
    m = measure_loop(loader, stepper(clock, 0.010), warmup_batches=2, batches=6, repeats=1,
                     epoch_batches=4, clock=clock)
    # batches 1-2 warm-up (epoch 1), counted: 3, 4 | 5, 6, 7, 8 | ... epoch starts at batch 5
    window = m.windows[0]
    assert window.epoch_start == (False, False, True, False, False, False)
    assert window.wait_s[2] == pytest.approx(0.210)
    assert loader.iterators == 2
    stats = summarize(m)
    assert stats.times.epoch_start_ms == pytest.approx(210.0)
    assert stats.times.wait_p95_ms > stats.times.wait_ms


def test_dataset_end_starts_a_new_epoch():
    clock = FakeClock()
    loader = FakeLoader(clock, length=3, fetch_s=0.010, start_s=0.1)
    m = measure_loop(loader, stepper(clock, 0.010), warmup_batches=1, batches=6, repeats=1, clock=clock)
    assert m.windows[0].epoch_start == (False, False, True, False, False, True)
    assert loader.iterators == 3


def test_no_epoch_start_in_window_gives_nan():
    clock = FakeClock()
    stats = summarize(measure_loop(FakeLoader(clock, 100, 0.01), stepper(clock, 0.01), warmup_batches=1,
                                   batches=3, repeats=1, clock=clock))
    assert stats.times.epoch_start_ms != stats.times.epoch_start_ms  # NaN


def test_empty_loader_is_an_error():
    clock = FakeClock()
    with pytest.raises(EmptyLoaderError, match="no batch"):
        measure_loop(FakeLoader(clock, 0, 0.01), stepper(clock, 0.01), warmup_batches=1, batches=3,
                     repeats=1, clock=clock)


def test_warmup_zero_still_sets_first_batch_apart():
    clock = FakeClock()
    loader = FakeLoader(clock, length=100, fetch_s=0.010, start_s=1.0)
    m = measure_loop(loader, stepper(clock, 0.01), warmup_batches=0, batches=2, repeats=1, clock=clock)
    assert m.start.first_batch_s == pytest.approx(1.010)
    assert m.windows[0].wait_s == pytest.approx((0.010, 0.010))


def test_batch_len_finds_the_first_tensor_in_nested_batches():
    torch = pytest.importorskip("torch")
    assert batch_len((torch.zeros(7, 3), torch.zeros(7))) == 7
    assert batch_len({"image": torch.zeros(5, 2), "label": [1] * 5}) == 5
    assert batch_len([{"x": torch.zeros(3)}]) == 3
    assert batch_len([1, 2, 3, 4]) == 4
    assert batch_len(object(), default=9) == 9


def test_warmup_runs_on_until_sampling_is_ready_and_order_of_hooks():
    clock = FakeClock()
    loader = FakeLoader(clock, length=1000, fetch_s=0.010)
    events: list[str] = []
    answers = iter([False, False, False, True])  # asked after each warm-up batch from the 2nd on

    class Hooks:
        def start(self) -> None:
            events.append("start")

        def ready(self, settled: bool) -> bool:
            events.append("asked")
            return next(answers)

        def end(self) -> None:
            events.append("end")

    m = measure_loop(loader, stepper(clock, 0.030), warmup_batches=2, batches=5, repeats=1, clock=clock,
                     sampling=Hooks())
    assert events == ["start", "asked", "asked", "asked", "asked", "end"]
    # 5 warm-up batches in all (2 asked for, 3 more until ready), the first set apart.
    assert loader.iterators == 1
    assert m.start.first_batch_s == pytest.approx(0.010)
    assert m.start.warmup_s == pytest.approx(0.030 + 4 * 0.040)
    assert m.windows[0].wait_s == pytest.approx((0.010,) * 5)


def test_warmup_ends_at_warmup_batches_when_sampling_is_ready_at_once():
    clock = FakeClock()
    loader = FakeLoader(clock, length=1000, fetch_s=0.010)
    class Ready:
        def start(self) -> None: ...
        def ready(self, settled: bool) -> bool:
            return settled
        def end(self) -> None: ...

    m = measure_loop(loader, stepper(clock, 0.030), warmup_batches=3, batches=2, repeats=1, clock=clock,
                     sampling=Ready())
    assert m.start.warmup_s == pytest.approx(0.030 + 2 * 0.040)


def test_ranks_whose_clocks_end_the_extra_warmup_at_different_batches_still_ask_together():
    """Each rank's extra warm-up ends by its own clock; ranks ask `ready` after every batch from
    warmup_batches on and decide together, so their collectives pair and they start together."""
    import threading

    ranks = 2
    barrier = threading.Barrier(ranks, timeout=10)
    votes: list[list[bool]] = [[] for _ in range(ranks)]
    asked: list[list[int]] = [[] for _ in range(ranks)]
    results: list[object] = [None] * ranks

    class Agree:
        """A collective, as RankContext.agree: True on every rank only when True on every rank."""

        def __init__(self, rank: int, done: list[int]) -> None:
            self.rank, self.done = rank, done

        def start(self) -> None: ...

        def ready(self, settled: bool) -> bool:
            asked[self.rank].append(self.done[0])
            votes[self.rank].append(settled)
            barrier.wait()
            agreed = all(votes[r][len(votes[self.rank]) - 1] for r in range(ranks))
            barrier.wait()
            return agreed

        def end(self) -> None: ...

    def run(rank: int) -> None:
        clock = FakeClock()
        loader = FakeLoader(clock, length=1000, fetch_s=0.010)
        done = [0]
        step_s = 0.030 if rank == 0 else 0.060  # rank 1's clock passes the limit two batches sooner

        def step(batch: object) -> None:
            clock.advance(step_s)
            done[0] += 1

        results[rank] = measure_loop(loader, step, warmup_batches=2, batches=3, repeats=1, clock=clock,
                                     sampling=Agree(rank, done), extra_warmup_batches=10,
                                     extra_warmup_max_s=0.15)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert asked[0] == asked[1], "both ranks ask after the same batches"
    # Rank 0 settles after 2 + 4 batches (0.16 s past the base), rank 1 after 2 + 3 (0.21 s): both wait
    # for rank 0.
    assert votes[1] == [False, False, False, True, True] and votes[0] == [False, False, False, False, True]
    assert asked[0] == [2, 3, 4, 5, 6]
    assert [r.start.warmup_batches for r in results] == [6, 6]  # type: ignore[attr-defined]
