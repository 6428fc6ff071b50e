"""The raw samples beside a sweep's CSV: every kind of value comes back as it was measured, a bad
file is a ResultsError naming it, older and newer files are handled, and a rewrite after a repeat
compresses only what is new."""

from __future__ import annotations

import dataclasses
import gzip
import importlib
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from loadtune.core.errors import ResultsError
from loadtune.measure.resources import ProcessSample, ResourceSamples, Sample, TreeSampler
from loadtune.record import samples
from loadtune.record.measurement import (
    CpuWindow,
    LoaderEpochs,
    LoaderUse,
    Measurement,
    SamplerEpoch,
    TrialStart,
    Window,
    combine_ranks,
)
from loadtune.record.samples import (
    SAMPLES_FORMAT_VERSION,
    TYPES,
    SamplesFile,
    StoredSamples,
    TrialSamples,
    read_samples,
    samples_file,
    write_samples,
)

HEAD = {"config_sha": "abc123", "host": "box", "scale": 0.5, "ranks": 2}


def assert_same(a, b, at="value"):
    """Equal field by field and of the same types all the way down (tuples stay tuples, ints
    ints); NaN equals NaN, arrays compare by dtype, shape and values (SamplerEpoch.indices has
    compare=False, so == alone would pass any)."""
    assert type(a) is type(b), f"{at}: {type(a).__name__} came back as {type(b).__name__}"
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), at
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            assert_same(getattr(a, f.name), getattr(b, f.name), f"{at}.{f.name}")
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), f"{at}: {len(a)} items came back as {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{at}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), at
    else:
        assert a == b, f"{at}: {a!r} came back as {b!r}"


def window(seed: int, keys: bool = True) -> Window:
    n = 4
    return Window(
        wait_s=(0.01 + seed, math.nan, 0.1 + 0.2, 1e-9), h2d_s=(0.0, 0.001, math.inf, 0.002),
        step_s=(0.03, -math.inf, 0.03, 5e-324), samples=(8, 8, 8, 7), epoch_start=(True, False, False, False),
        copy_s=(0.0009,) * n, wait_cpu_s=(0.0001, 0.0002, 0.0, 0.0003),
        cpu=CpuWindow(0.2, 0.15, 0.6, None if seed else 1.25, None if seed else 8),
        loaders=(LoaderUse(-1, 0, 0.0, 0.0), LoaderUse(0, 2, 0.05, 0.04), LoaderUse(1, 2, math.nan, 0.04)),
        keys=(0, 1, 2**63 + seed, 2**64 - 1) * 8 if keys else (),
        labels=tuple(range(-3, 29)) if keys else (),
    )


def resources(root: int) -> ResourceSamples:
    def proc(pid: int, t: float, memory: bool) -> ProcessSample:
        return ProcessSample(pid=pid, ppid=root if pid != root else 1, started=1.7e9 + pid / 7, cpu_s=t * 0.9,
                             children_cpu_s=0.0, pss_bytes=123_456_789 + pid if memory else None,
                             num_threads=None if pid == root + 2 else 12, read_bytes=2**40 + pid,
                             pss_file_bytes=4096 if memory else None)

    taken = tuple(Sample(t, tuple(proc(root + p, t, t == 0.0) for p in range(3)), memory=t == 0.0)
                  for t in (0.0, 0.2, 0.4))
    return ResourceSamples(root_pid=root, samples=taken, memory_metric="pss", io_metric=None, interval_s=0.2,
                           sampler_cpu_s=0.004, main_pids=(root + 1,))


def sampled() -> tuple[SamplerEpoch, ...]:
    return (SamplerEpoch(np.arange(10, dtype=np.int64)[::-1].copy(), True, 10, 4),
            SamplerEpoch(np.array([2**62, -5, 0], dtype=np.int64), False, None, 3, replacement=True))


def rank_measurement(seed: int) -> Measurement:
    return Measurement(start=TrialStart(first_batch_s=0.5 + seed, warmup_s=0.25, warmup_batches=3, setup_s=1.5),
                       windows=(window(seed), window(seed + 1)), pinned=True, batch_bytes=1 << 20,
                       epochs=LoaderEpochs(sampled=sampled()))


def rich_measurement() -> Measurement:
    """Every kind the samples hold: each dataclass, numpy indices, NaN, infinities, None, ranks."""
    combined = combine_ranks([rank_measurement(0), rank_measurement(1)])
    return dataclasses.replace(combined, resources=(resources(100), resources(200)), pinned=None,
                               batch_bytes=None)


def rich_trial() -> TrialSamples:
    plain = Measurement(start=TrialStart(first_batch_s=math.inf), windows=(window(0, keys=False),),
                        epochs=LoaderEpochs(sampled=sampled()))
    return TrialSamples("workers=4", 2, (rich_measurement(), plain), (3.25, math.nan), disturbed=1,
                        failure=("timeout", "no result after measure.timeout_s=60s", 61.5),
                        predicted=(1234.5, 0.125), stopped_early=True)


def write_raw(path: Path, top: object) -> None:
    path.write_bytes(gzip.compress(json.dumps(top).encode()))


def stored_top(trials: list[object], version: int = SAMPLES_FORMAT_VERSION) -> dict[str, object]:
    return {"format_version": version, **HEAD, "trials": trials}


def loader_use(**values: object) -> dict[str, object]:
    return {"type": "LoaderUse", "worker": 0, "batches": 3, "fetch_wall_s": 0.5, "fetch_cpu_s": 0.25, **values}


# --- round trips ---------------------------------------------------------------------------------


def test_the_samples_file_sits_beside_the_csv(tmp_path):
    assert samples_file(tmp_path / "sweep.csv") == tmp_path / "sweep.samples.json.gz"
    assert samples_file("out/run.v2.csv") == Path("out/run.v2.samples.json.gz")


def test_every_kind_of_value_comes_back_as_measured(tmp_path):
    path = samples_file(tmp_path / "sweep.csv")
    trials = [rich_trial(), TrialSamples("baseline", 1, (), ())]
    write_samples(path, trials=trials, **HEAD)
    stored = read_samples(path)
    assert isinstance(stored, StoredSamples)
    assert (stored.format_version, stored.config_sha, stored.host, stored.scale, stored.ranks) == \
        (SAMPLES_FORMAT_VERSION, "abc123", "box", 0.5, 2)
    assert list(stored.trials) == ["workers=4", "baseline"]
    assert_same(trials[0], stored.trials["workers=4"])
    assert_same(trials[1], stored.trials["baseline"])
    back = stored.trials["workers=4"].measurements[0]
    assert len(back.ranks) == 2 and back.ranks[1].epochs.sampled[1].indices.dtype == np.int64
    assert back.ranks[0].windows[0].keys[3] == 2**64 - 1


def test_the_file_is_plain_json_in_gzip(tmp_path):
    """Any gzip reader reads the whole file (several members are one stream), and any JSON reader
    the text: no NaN or Infinity tokens."""
    path = tmp_path / "s.samples.json.gz"
    write_samples(path, trials=[rich_trial()], **HEAD)
    text = gzip.decompress(path.read_bytes()).decode("ascii")
    top = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in the JSON"))
    assert top["format_version"] == 1 and top["trials"][0]["type"] == "TrialSamples"
    window = top["trials"][0]["measurements"][0]["windows"][0]
    assert window["type"] == "Window" and window["wait_s"][1] == {"float": "nan"}
    assert window["h2d_s"][2] == {"float": "inf"} and window["step_s"][1] == {"float": "-inf"}
    epoch = top["trials"][0]["measurements"][0]["ranks"][0]["sampled"][0]
    assert epoch["indices"] == {"ndarray": "int64", "data": list(range(9, -1, -1))}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(), max_size=6), st.lists(st.integers(-2**63, 2**64 - 1), max_size=6),
       st.one_of(st.none(), st.floats()))
def test_any_floats_and_ints_come_back(tmp_path_factory, floats, ints, busy):
    path = tmp_path_factory.mktemp("any") / "s.samples.json.gz"
    n = len(floats)
    measured = Measurement(start=TrialStart(first_batch_s=0.0), windows=(Window(
        wait_s=tuple(floats), h2d_s=tuple(floats), step_s=tuple(floats), samples=(1,) * n,
        epoch_start=(False,) * n, cpu=CpuWindow(1.0, 0.5, 0.5, busy, 4), keys=tuple(ints)),))
    trial = TrialSamples("t", 1, (measured,), tuple(floats))
    write_samples(path, trials=[trial], **HEAD)
    assert_same(trial, read_samples(path).trials["t"])


def test_a_measurement_from_the_real_loop_comes_back(tmp_path):
    """The measured loop run in this process (a fake clock, numpy batches, the real CPU probe and
    process-tree sampler), as two ranks combined: stored and read back field by field."""
    from loadtune.measure.cpu import read_cpu, window_between
    from loadtune.measure.loop import measure_loop
    from tests.test_measure import FakeClock

    class Loader:
        """Shuffled batches of (images, labels) as numpy arrays, noting the indices handed out."""

        def __init__(self, clock: FakeClock, seed: int) -> None:
            self.clock, self.rng, self.epochs = clock, np.random.default_rng(seed), []
            self.data = self.rng.integers(0, 255, (64, 3, 8, 8), dtype=np.uint8)

        def __iter__(self):
            order = self.rng.permutation(len(self.data))
            self.epochs.append([])
            for start in range(0, len(order), 8):
                picked = order[start:start + 8]
                self.epochs[-1].append(picked)
                self.clock.advance(0.004)
                yield self.data[picked], picked.astype(np.int64)

    class Probe:
        def read(self):
            return read_cpu()

        def between(self, start, end):
            return window_between(start, end), (LoaderUse(-1, 20, 0.08, 0.07),)

    def one_rank(seed: int) -> Measurement:
        clock = FakeClock()
        loader = Loader(clock, seed)
        measured = measure_loop(loader, lambda batch: clock.advance(0.01), warmup_batches=2, batches=20,
                                repeats=2, clock=clock, default_batch_size=8, probe=Probe())
        epochs = tuple(SamplerEpoch(np.concatenate(e).astype(np.int64), i < len(loader.epochs) - 1, 64, 8)
                       for i, e in enumerate(loader.epochs))
        return dataclasses.replace(measured, epochs=LoaderEpochs(sampled=epochs),
                                   start=dataclasses.replace(measured.start, setup_s=0.1))

    with TreeSampler(os.getpid(), interval_s=0.05) as sampler:
        per_rank = [one_rank(0), one_rank(1)]
    assert sampler.result is not None and len(sampler.result.samples) >= 2
    measured = dataclasses.replace(combine_ranks(per_rank), resources=(sampler.result,))
    assert len(per_rank[0].windows[0].keys) == 160 and per_rank[0].windows[0].labels
    trial = TrialSamples("baseline", 1, (measured,), (0.9,))
    write_samples(tmp_path / "s.samples.json.gz", trials=[trial], **HEAD)
    assert_same(trial, read_samples(tmp_path / "s.samples.json.gz").trials["baseline"])


# --- rewriting -----------------------------------------------------------------------------------


def test_a_rewrite_compresses_only_new_measurements(tmp_path, monkeypatch):
    path = tmp_path / "s.samples.json.gz"
    first, second = rank_measurement(0), rank_measurement(1)
    file = SamplesFile(path)
    file.write(trials=[TrialSamples("a", 1, (first,), (1.0,)), TrialSamples("b", 1, (), ())], **HEAD)
    dumped = []
    real = samples._dumps
    monkeypatch.setattr(samples, "_dumps", lambda value: dumped.append(value) or real(value))
    grown = [TrialSamples("a", 1, (first,), (1.0,)), TrialSamples("b", 1, (second,), (2.0,), disturbed=1)]
    file.write(trials=grown, **HEAD)
    assert [id(v) for v in dumped if isinstance(v, Measurement)] == [id(second)]
    stored = read_samples(path)
    assert_same(grown[0], stored.trials["a"])
    assert_same(grown[1], stored.trials["b"])
    # A measurement that is equal but not the same object is stored afresh, never from the cache.
    dumped.clear()
    again = dataclasses.replace(first)
    file.write(trials=[TrialSamples("a", 1, (again,), (1.0,))], **HEAD)
    assert [id(v) for v in dumped if isinstance(v, Measurement)] == [id(again)]
    assert list(read_samples(path).trials) == ["a"]


def test_the_write_is_atomic_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "deeper" / "s.samples.json.gz"
    write_samples(path, trials=[rich_trial()], **HEAD)
    assert os.listdir(path.parent) == [path.name]
    before = path.read_bytes()
    broken = Measurement(start=TrialStart(first_batch_s=0.0), windows=(), resources=(object(),))
    with pytest.raises(TypeError, match="cannot store a object"):
        write_samples(path, trials=[TrialSamples("x", 1, (broken,), (1.0,))], **HEAD)
    assert path.read_bytes() == before
    assert os.listdir(path.parent) == [path.name]


def test_trials_named_twice_are_refused(tmp_path):
    with pytest.raises(ValueError, match="named twice: a"):
        write_samples(tmp_path / "s.json.gz", trials=[TrialSamples("a", 1, (), ())] * 2, **HEAD)


def test_arrays_keep_their_dtype_and_shape_and_object_arrays_are_refused(tmp_path):
    with pytest.raises(TypeError, match="numpy array of object"):
        samples._dumps(np.array([object()]))
    epoch = SamplerEpoch(np.arange(6, dtype=np.int32).reshape(2, 3), True, 6, 3)
    path = tmp_path / "s.samples.json.gz"
    measured = Measurement(TrialStart(0.0), (), epochs=LoaderEpochs((epoch,)))
    write_samples(path, trials=[TrialSamples("t", 1, (measured,), (1.0,))], **HEAD)
    assert_same(epoch.indices, read_samples(path).trials["t"].measurements[0].epochs.sampled[0].indices)


# --- reading: missing, bad, older and newer files ------------------------------------------------


def test_a_missing_file_is_none(tmp_path):
    assert read_samples(tmp_path / "none.samples.json.gz") is None
    assert SamplesFile(tmp_path / "none.samples.json.gz").read() is None


@pytest.mark.parametrize("damage", ["truncated", "not gzip", "not json", "empty", "folder", "not ours"])
def test_a_bad_file_is_a_results_error_naming_it(tmp_path, damage):
    path = tmp_path / "s.samples.json.gz"
    write_samples(path, trials=[rich_trial()], **HEAD)
    whole = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(whole[:len(whole) // 2])
    elif damage == "not gzip":
        path.write_bytes(b"trial,status\nbaseline,ok\n")
    elif damage == "not json":
        path.write_bytes(gzip.compress(b'{"format_version": 1, "trials": ['))
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "folder":
        path.unlink()
        path.mkdir()
    else:
        write_raw(path, {"trial": "baseline"})
    with pytest.raises(ResultsError, match=f"^{re.escape(str(path))}: "):
        read_samples(path)


def test_a_file_from_a_newer_format_asks_for_an_upgrade(tmp_path):
    path = tmp_path / "s.samples.json.gz"
    write_raw(path, stored_top([], version=2))
    message = "written by a newer loadtune (samples format 2; this one reads up to 1): upgrade loadtune"
    with pytest.raises(ResultsError, match=f"^{re.escape(f'{path}: {message}')}$"):
        read_samples(path)
    # Even when it holds a type this version does not know: the version is what to report.
    write_raw(path, stored_top([{"type": "FromTheFuture", "x": 1}], version=2))
    with pytest.raises(ResultsError, match="samples format 2"):
        read_samples(path)


def test_an_unknown_type_is_a_results_error(tmp_path):
    path = tmp_path / "s.samples.json.gz"
    write_raw(path, stored_top([{"type": "FromTheFuture", "x": 1}]))
    with pytest.raises(ResultsError, match="'FromTheFuture', a type this loadtune does not know"):
        read_samples(path)


def test_a_field_from_a_newer_version_is_dropped(tmp_path):
    path = tmp_path / "s.samples.json.gz"
    measurement = {"type": "Measurement", "first_batch_s": 0.5, "windows": [], "gpu_busy": [1, 2, 3],
                   "resources": [loader_use(worker_pid=1234)]}
    write_raw(path, stored_top([{"type": "TrialSamples", "trial": "t", "round": 1, "measurements": [measurement],
                                 "walls_s": [1.0], "energy_j": 12.5}]))
    trial = read_samples(path).trials["t"]
    assert trial == TrialSamples("t", 1, (Measurement(TrialStart(0.5), (), resources=(LoaderUse(0, 3, 0.5, 0.25),)),),
                                 (1.0,))


FIXTURE = Path(__file__).resolve().parent / "fixtures" / "samples" / "v1.samples.json.gz"


def fixture_trials() -> list[TrialSamples]:
    """What tests/fixtures/samples/v1.samples.json.gz holds (written with HEAD): every stored
    Measurement field set, its start's and its epochs' included."""
    measured = rank_measurement(2)
    epochs = LoaderEpochs(measured.epochs.sampled, dataset_batches=40, window_epoch_batches=20, restarts_workers=True)
    return [rich_trial(), TrialSamples("epochs", 1, (dataclasses.replace(measured, epochs=epochs),), (2.5,))]


def test_a_file_written_before_reads_and_is_written_the_same_again(tmp_path):
    """Measurement's grouped fields are stored flat, as when they were its own: a file from then
    reads into the groups, and the same trials are written to the same bytes."""
    stored = read_samples(FIXTURE)
    for trial in fixture_trials():
        assert_same(trial, stored.trials[trial.trial])
    path = tmp_path / "s.samples.json.gz"
    write_samples(path, trials=fixture_trials(), **HEAD)
    assert gzip.decompress(path.read_bytes()) == gzip.decompress(FIXTURE.read_bytes())


def test_a_field_an_older_version_lacked_takes_its_default(tmp_path):
    path = tmp_path / "s.samples.json.gz"
    old_window = {"type": "Window", "wait_s": [0.5], "h2d_s": [0.0], "step_s": [0.25], "samples": [4],
                  "epoch_start": [True]}
    write_raw(path, stored_top([{"type": "TrialSamples", "trial": "t", "round": 1, "walls_s": [2.0],
                                 "measurements": [{"type": "Measurement", "first_batch_s": 1.0,
                                                   "windows": [old_window]}]}]))
    trial = read_samples(path).trials["t"]
    old = Measurement(TrialStart(1.0), (Window((0.5,), (0.0,), (0.25,), (4,), (True,)),))
    assert trial == TrialSamples("t", 1, (old,), (2.0,))
    assert trial.measurements[0].windows[0].keys == () and trial.measurements[0].ranks == ()
    assert trial.disturbed == 0 and trial.failure is None and not trial.stopped_early


def test_a_stored_object_without_a_required_field_is_a_results_error(tmp_path):
    path = tmp_path / "s.samples.json.gz"
    write_raw(path, stored_top([{"type": "TrialSamples", "trial": "t", "round": 1, "measurements": []}]))
    with pytest.raises(ResultsError, match=f"^{re.escape(str(path))}: holds a TrialSamples without its walls_s"):
        read_samples(path)


@pytest.mark.parametrize("value, why", [
    ({"ndarray": "object", "data": [1]}, "an array that cannot be read"),
    ({"ndarray": "no such dtype", "data": [1]}, "an array that cannot be read"),
    ({"float": "NaN!"}, "a float spelled 'NaN!'"),
    ({"type": 5}, "whose type is not a name"),
    ({"type": "LoaderUse", "worker": 0}, "a LoaderUse without its batches, fetch_cpu_s, fetch_wall_s"),
])
def test_a_stored_value_that_cannot_be_read_is_a_results_error(tmp_path, value, why):
    path = tmp_path / "s.samples.json.gz"
    write_raw(path, stored_top([{"type": "TrialSamples", "trial": "t", "round": 1, "walls_s": [value],
                                 "measurements": []}]))
    with pytest.raises(ResultsError, match=f"^{re.escape(str(path))}: .*{re.escape(why)}"):
        read_samples(path)


def test_a_trial_that_is_not_a_trial_is_a_results_error(tmp_path):
    path = tmp_path / "s.samples.json.gz"
    write_raw(path, stored_top([loader_use()]))
    with pytest.raises(ResultsError, match="holds a trial that is not a TrialSamples: LoaderUse"):
        read_samples(path)


def test_a_file_of_one_gzip_member_reads_too(tmp_path):
    """Written by anything else that writes gzip: the members are the writer's affair."""
    path = tmp_path / "s.samples.json.gz"
    write_samples(path, trials=[rich_trial()], **HEAD)
    path.write_bytes(gzip.compress(gzip.decompress(path.read_bytes())))
    assert_same(rich_trial(), read_samples(path).trials["workers=4"])


# --- the registry --------------------------------------------------------------------------------


def test_every_registered_type_is_where_its_path_says():
    """Files name types by these short names; each path must lead to that class as it is now."""
    for name, path in TYPES.items():
        assert "." not in name and ":" in path
        module, _, attr = path.partition(":")
        cls = getattr(importlib.import_module(module), attr)
        assert dataclasses.is_dataclass(cls) and f"{cls.__module__}:{cls.__qualname__}" == path
    held = {Measurement, Window, CpuWindow, LoaderUse, SamplerEpoch, ResourceSamples, Sample, ProcessSample,
            TrialSamples}
    assert {f"{c.__module__}:{c.__qualname__}" for c in held} <= set(TYPES.values())


def test_importing_and_reading_need_neither_the_process_machinery_nor_torch(tmp_path):
    """Reading a file, with process-tree samples or without, imports none of the process
    machinery and never torch: every type it holds lives in loadtune.record.measurement."""
    plain, rich = tmp_path / "plain.samples.json.gz", tmp_path / "rich.samples.json.gz"
    write_samples(plain, trials=[TrialSamples("t", 1, (rank_measurement(0),), (1.0,))], **HEAD)
    write_samples(rich, trials=[rich_trial()], **HEAD)
    code = ("import sys\n"
            "from loadtune.record.samples import read_samples\n"
            "def seen(): return sorted(m for m in sys.modules if m.split('.')[0] == 'torch' or "
            "m.startswith(('loadtune.sweep_process', 'loadtune.trial_process')))\n"
            f"assert read_samples({str(plain)!r}).trials['t'].measurements[0].windows\n"
            "print(seen())\n"
            f"assert read_samples({str(rich)!r}).trials['workers=4'].measurements[0].resources\n"
            "print(seen())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "[]"]


def test_a_window_racing_ended_early_is_stored_and_read_back(tmp_path):
    cut = Measurement(TrialStart(1.0), (Window((0.5,) * 4, (0.0,) * 4, (0.25,) * 4, (4,) * 4, (False,) * 4),),
                      behind=True)
    path = tmp_path / "s.samples.json.gz"
    write_samples(path, trials=[TrialSamples("t", 1, (cut,), (2.0,), stopped_early=True)], **HEAD)
    trial = read_samples(path).trials["t"]
    assert trial.measurements[0].behind and trial.stopped_early
