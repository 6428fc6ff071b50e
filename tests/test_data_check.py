"""The data check: a faster config must feed the same samples. The comparison on made-up keys
and sampler indices (exact), the fingerprints, the measured loop's keys, the indices a sampler
hands out, the runner keeping flagged trials out of the pick, and real sweeps and trials: streams
split and unsplit between workers and ranks, map-style datasets with random augmentation, samplers
that repeat or ignore the rank."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from loadtune import synthetic
from loadtune.asked.config import load_config
from loadtune.asked.plan import trial_for
from loadtune.core.kinds import RankBy
from loadtune.measure.datacheck import (
    ACROSS_RANKS,
    EPOCH_CONTENT,
    EPOCH_SIZE,
    LABEL,
    RANKS_FIX,
    REPEATED,
    SAMPLER_DIFFERENT_FIX,
    SAMPLER_FIX,
    SHARDS_FIX,
    WORKERS_FIX,
    Check,
    check_all,
    delivery,
    fixes,
    handed,
    sampled,
    segments,
    streams,
)
from loadtune.measure.fingerprint import sample_keys
from loadtune.measure.loop import measure_loop
from loadtune.record.findings import RepeatingSampler
from loadtune.record.measurement import LoaderEpochs, Measurement, SamplerEpoch, TrialStart, Window, combine_ranks
from loadtune.record.record import read_records
from loadtune.sweep_process.conclude import decision, ranked
from loadtune.sweep_process.launch import Outcome, run_in_trial_process
from loadtune.sweep_process.trial_run import merged
from loadtune.trial_process.channel import SweepChannel
from loadtune.trial_process.execute import measure_here
from loadtune.trial_process.jobs import TrialJob
from loadtune.trial_process.preflight import stable_bytes
from loadtune.trial_process.sampled import recording
from tests.conftest import fake_runner, run_cli, tiny_config


def window(batches: list[list[int]], starts: set[int] = frozenset(), labels: bool = False) -> Window:
    """A window whose batches hold these keys (as labels too, with `labels`); `starts` are the
    batches that begin an epoch."""
    n = len(batches)
    keys = tuple(k for b in batches for k in b)
    return Window((0.01,) * n, (0.0,) * n, (0.01,) * n, tuple(len(b) for b in batches),
                  tuple(i in starts for i in range(n)), keys=() if labels else keys, labels=keys if labels else ())


def batched(keys: list[int], size: int = 4) -> list[list[int]]:
    return [keys[i:i + size] for i in range(0, len(keys), size)]


def epochs(stream: list[int], count: int, size: int = 4) -> tuple[list[list[int]], set[int]]:
    """`count` whole epochs of `stream` in batches, preceded and followed by one batch of a
    neighbouring epoch, and the batches that start an epoch."""
    per_epoch = batched(stream, size)
    batches = [per_epoch[-1]] + per_epoch * count + [per_epoch[0]]
    starts = {1 + e * len(per_epoch) for e in range(count + 1)}
    return batches, starts


DATASET = list(range(24))


def one_rank(batches, starts=frozenset(), labels=False):
    return delivery([[window(batches, starts, labels)]], LABEL if labels else "content")


# --- the comparison, on made-up keys -------------------------------------------------------------


def test_a_window_splits_at_epoch_starts_and_only_whole_epochs_are_complete():
    batches, starts = epochs(DATASET, 2)
    found = segments(window(batches, starts))
    assert [(keys.tolist(), complete) for keys, complete in found] == [
        ([20, 21, 22, 23], False), (DATASET, True), (DATASET, True), ([0, 1, 2, 3], False)]
    # Epochs of exactly measure.epoch_batches batches may have been cut short: not complete.
    assert [complete for _, complete in segments(window(batches, starts), epoch_batches=6)] == [False] * 4
    assert [complete for _, complete in segments(window(batches, starts), epoch_batches=7)] == [False, True, True,
                                                                                              False]


def test_repeats_count_within_an_epoch_only():
    batches, starts = epochs(DATASET, 2)
    assert one_rank(batches, starts).repeated == 0, "the same samples in the next epoch are no repeat"
    assert one_rank([[0, 1, 2, 3], [0, 1, 4, 5]]).repeated == 2


def test_an_unsplit_stream_is_duplicates_and_a_new_order_is_the_same():
    rng = np.random.default_rng(0)
    shuffled = [int(k) for k in rng.permutation(DATASET)]
    # Two workers each yielding the whole stream, batch by batch in turn.
    unsplit = [b for batch in batched(DATASET) for b in (batch, batch)]
    checks = check_all({"baseline": one_rank(*epochs(DATASET, 2)), "shuffle=True": one_rank(*epochs(shuffled, 2)),
                        "num_workers=2": one_rank(unsplit[:10])}, "baseline")
    assert checks["baseline"] == Check("same") and checks["shuffle=True"] == Check("same")
    assert checks["num_workers=2"] == Check("duplicates", (REPEATED,), "50% of its samples came again within the "
                                                                       "same epoch, against 0% in the baseline")
    assert fixes(checks["num_workers=2"], iterable=True) == (WORKERS_FIX, SHARDS_FIX)


def test_a_whole_epoch_that_holds_the_stream_twice_is_duplicates_even_by_labels_that_repeat():
    classes = [k % 3 for k in DATASET]  # class labels: repeat within every epoch
    doubled = [c for batch in batched(classes) for c in batch] * 2
    checks = check_all({"baseline": one_rank(*epochs(classes, 2), labels=True),
                        "num_workers=2": one_rank(*epochs(doubled, 1), labels=True)}, "baseline")
    assert checks["baseline"] == Check("same")
    assert checks["num_workers=2"] == Check("duplicates", (REPEATED,), "an epoch delivered 48 samples where the "
                                                                       "baseline delivered 24: each sample 2 times")


def test_labels_that_repeat_without_a_whole_epoch_cannot_be_checked():
    classes = [k % 3 for k in DATASET]
    checks = check_all({"baseline": one_rank(batched(classes)[:4], labels=True),
                        "num_workers=2": one_rank(batched(classes)[:4], labels=True)}, "baseline")
    assert checks["num_workers=2"].verdict is None
    assert checks["num_workers=2"].reason.startswith("even the trial that repeats least repeats 81% of its samples")


def test_samples_missing_from_or_foreign_to_a_whole_epoch_are_different():
    baseline = one_rank(*epochs(DATASET, 2))
    checks = check_all({
        "baseline": baseline,
        "missing": one_rank(*epochs(DATASET[:12], 2)),
        "foreign": one_rank(*epochs([k + 100 for k in DATASET], 2)),
        "one batch off": one_rank(*epochs(DATASET[:20] + [200, 201, 202, 203], 2)),  # drop_last's remainder
    }, "baseline")
    assert checks["missing"] == Check("different", (EPOCH_SIZE,), "an epoch delivered 12 samples where the "
                                                                  "baseline delivered 24")
    assert checks["foreign"] == Check("different", (EPOCH_CONTENT,), "100% of an epoch's samples never came in "
                                                                     "the baseline")
    assert checks["one batch off"] == Check("same"), "within one batch: drop_last drops a different remainder"


def test_missing_samples_of_the_same_count_are_different():
    # Each sample of the first half twice, the second half never: as many samples per epoch.
    half = DATASET[:12]
    twice = [k for k in half for _ in range(2)]
    checks = check_all({"baseline": one_rank(*epochs(DATASET, 2)), "t": one_rank(*epochs(twice, 2))}, "baseline")
    assert checks["t"].verdict == "duplicates", "repeats within the epoch are named first"


def test_ranks_that_get_the_same_samples_are_duplicates_and_a_samplers_padding_is_not():
    def two_ranks(rank0, rank1):
        return delivery([[window(*epochs(rank0, 2))], [window(*epochs(rank1, 2))]])

    evens, odds = DATASET[0::2], DATASET[1::2]
    padded = DATASET[:23]  # 23 samples over 2 ranks: the sampler repeats one to even them out
    deliveries = {
        "baseline": two_ranks(evens, odds),
        "padded": two_ranks(padded[0::2], padded[1::2] + [padded[0]]),
        "unsharded": two_ranks(DATASET, DATASET),
    }
    checks = check_all(deliveries, "baseline")
    assert deliveries["unsharded"].shared == 112 and deliveries["padded"].shared == 4
    assert deliveries["padded"].shared_allowance == 8, "2 per epoch part compared: the padded sample on each side"
    assert checks["baseline"] == Check("same") and checks["padded"] == Check("same")
    assert checks["unsharded"] == Check("duplicates", (ACROSS_RANKS,), "100% of its samples also went to another "
                                                                       "rank in the same epoch")
    assert fixes(checks["unsharded"], iterable=True) == (RANKS_FIX,)


def test_a_baseline_that_repeats_is_flagged_against_the_trial_that_repeats_least():
    unsplit = [b for batch in batched(DATASET) for b in (batch, batch)]
    checks = check_all({"baseline": one_rank(unsplit[:10]), "num_workers=0": one_rank(*epochs(DATASET, 2))},
                       "baseline")
    assert checks["num_workers=0"] == Check("same")
    assert checks["baseline"] == Check("duplicates", (REPEATED,), "50% of its samples came again within the same "
                                                                  "epoch, against 0% in num_workers=0")


def test_a_trial_without_keys_is_not_checked():
    assert delivery([[Window((0.1,), (0.0,), (0.1,), (4,), (False,))]]) is None
    assert delivery([[window([[1, 2, 3]])]], LABEL) is None, "no labels"


def test_combined_ranks_keep_each_ranks_keys():
    per_rank = [Measurement(TrialStart(0.1), (window([[0, 2], [4, 6]]),)),
                Measurement(TrialStart(0.1), (window([[1, 3], [5, 7]]),))]
    combined = combine_ranks(per_rank)
    assert combined.windows[0].keys == (), "the combination is no one stream"
    assert [w[0].keys for w in streams(combined)] == [(0, 2, 4, 6), (1, 3, 5, 7)]


# --- the comparison, on made-up sampler indices ------------------------------------------------


def handed_out(indices: list[int], complete: bool = False, size: int | None = 24, batch: int = 4,
               replacement: bool = False) -> SamplerEpoch:
    """One epoch of a sampler: the indices it handed out, whether it ran to its end, its length."""
    return SamplerEpoch(np.asarray(indices, np.int64), complete, len(indices) if complete else size, batch,
                        replacement)


def permutation(seed: int, n: int = 24) -> list[int]:
    return [int(k) for k in np.random.default_rng(seed).permutation(n)]


def by_sampler(*epochs: SamplerEpoch):
    return handed([epochs])


def test_partial_epochs_of_any_order_are_the_same_whatever_the_transforms():
    # Epochs cut short by measure.epoch_batches (no sampler epoch runs to its end), each handed
    # out further ahead by more prefetching: only repeats and the sampler's length are known.
    deliveries = {"baseline": by_sampler(handed_out(permutation(0)[:12]), handed_out(permutation(1)[:12])),
                  "num_workers=4": by_sampler(handed_out(permutation(2)[:20]), handed_out(permutation(3)[:20])),
                  "in_order=false": by_sampler(handed_out(permutation(4)[:16]), handed_out(permutation(5)[:16]))}
    assert deliveries["baseline"].exact and deliveries["baseline"].sizes == (24, 24)
    assert set(check_all(deliveries, "baseline").values()) == {Check("same")}


def test_an_index_handed_out_twice_in_one_epoch_is_duplicates_and_again_in_the_next_is_not():
    again = permutation(1)[:11] + [permutation(1)[0]]
    deliveries = {"baseline": by_sampler(handed_out(permutation(0)[:12]), handed_out(permutation(0)[:12])),
                  "t": by_sampler(handed_out(permutation(2)[:12]), handed_out(again))}
    assert deliveries["baseline"].repeated == 0, "the same indices in the next epoch are no repeat"
    checks = check_all(deliveries, "baseline")
    assert checks["baseline"] == Check("same")
    assert checks["t"] == Check("duplicates", (REPEATED,), "the sampler handed out 1 of its 24 indices again within "
                                                           "the same epoch, against 0 of 24 in the baseline")
    assert fixes(checks["t"], iterable=False) == (SAMPLER_FIX,)


def test_a_sampler_that_repeats_in_every_trial_compares_the_trials_with_each_other():
    # Oversampling, or any sampler every trial shares: the trials deliver what the baseline does.
    def oversampled(seed: int) -> list[int]:
        return permutation(seed)[:10] + [3, 3]

    deliveries = {name: by_sampler(handed_out(oversampled(seed)), handed_out(oversampled(seed + 10)))
                  for seed, name in enumerate(("baseline", "num_workers=2", "prefetch_factor=4"))}
    assert set(check_all(deliveries, "baseline").values()) == {Check("same")}


def test_a_sampler_drawing_with_replacement_repeats_by_design():
    draws = [int(k) for k in np.random.default_rng(0).integers(0, 24, 24)]
    trial = by_sampler(handed_out(draws, complete=True, replacement=True))
    assert trial.replacement and trial.repeated == 0
    baseline = by_sampler(handed_out(permutation(0), complete=True, replacement=True))
    assert check_all({"baseline": baseline, "t": trial}, "baseline")["t"] == Check("same"), \
        "each epoch its own draw: contents are not compared"


def test_ranks_by_indices_sharded_are_the_same_and_overlapping_are_duplicates():
    order = permutation(0, 23)
    padded = order + order[:1]  # a DistributedSampler's 23 indices over 2 ranks: one given to both
    sharded = handed([[handed_out(padded[0::2][:8], size=12)], [handed_out(padded[1::2][:8], size=12)]])
    whole = handed([[handed_out(padded[0::2], complete=True)], [handed_out(padded[1::2], complete=True)]])
    ignoring = handed([[handed_out(order[:8], size=23)], [handed_out(order[:8], size=23)]])
    assert whole.shared == 2 and whole.shared_allowance == 2 and whole.sizes == (24,)
    checks = check_all({"baseline": sharded, "whole": whole, "ignoring": ignoring}, "baseline")
    assert checks["baseline"] == Check("same") and checks["whole"] == Check("same")
    assert checks["ignoring"] == Check("duplicates", (ACROSS_RANKS,), "16 of its 16 indices also went to another "
                                                                      "rank in the same epoch")
    assert fixes(checks["ignoring"], iterable=False) == (RANKS_FIX,)


def test_ranks_drawing_with_replacement_are_duplicates_only_with_the_same_draws():
    rng = np.random.default_rng(0)
    draws = [[int(k) for k in rng.integers(0, 100, 32)] for _ in range(2)]
    own = handed([[handed_out(draws[0], size=32, replacement=True)], [handed_out(draws[1], size=32,
                                                                                 replacement=True)]])
    same_seed = handed([[handed_out(draws[0], size=32, replacement=True)],
                        [handed_out(draws[0], size=32, replacement=True)]])
    checks = check_all({"baseline": own, "same seed": same_seed}, "baseline")
    assert checks["baseline"] == Check("same")
    assert checks["same seed"].verdict == "duplicates" and checks["same seed"].causes == (ACROSS_RANKS,)


def test_epochs_of_another_size_or_content_are_different_and_drop_last_is_not():
    baseline = by_sampler(handed_out(permutation(0)[:8]), handed_out(permutation(0), complete=True))
    checks = check_all({
        "baseline": baseline,
        "subset": by_sampler(handed_out(permutation(1, 12)[:8], size=12)),  # the sampler's len: never complete
        "drop_last=true": by_sampler(handed_out(permutation(2)[:20], complete=True)),  # one batch less
        "foreign": by_sampler(handed_out([k + 100 for k in permutation(3)], complete=True)),
        "unknown size": by_sampler(handed_out(permutation(4)[:8], size=None)),  # a custom batch sampler's
    }, "baseline")
    assert checks["subset"] == Check("different", (EPOCH_SIZE,), "an epoch of its sampler holds 12 indices where "
                                                                 "the baseline's holds 24")
    assert checks["drop_last=true"] == Check("same") and checks["unknown size"] == Check("same")
    assert checks["foreign"] == Check("different", (EPOCH_CONTENT,), "100% of an epoch's indices never came in "
                                                                     "the baseline")
    assert fixes(checks["subset"], iterable=False) == (SAMPLER_DIFFERENT_FIX,)


# --- the fingerprints ----------------------------------------------------------------------------


def test_keys_tell_samples_apart_and_mix_the_label_in():
    data = torch.arange(64, dtype=torch.float32).view(8, 8)
    keys, labels = sample_keys((data, torch.arange(8)), 8)
    assert len(set(keys.tolist())) == 8 and labels.tolist() == list(range(8))
    same_rows, _ = sample_keys((data[[0, 0]], torch.tensor([3, 4])), 2)
    assert same_rows[0] != same_rows[1], "equal bytes with other labels"
    assert sample_keys({"text": ["a", "b"]}, 2) == (None, None)


@pytest.mark.slow  # another interpreter, which imports torch
def test_keys_are_the_same_for_the_same_values_in_any_layout_or_process():
    images = torch.rand(4, 3, 8, 8)
    keys, _ = sample_keys((images,), 4)
    assert keys.tolist() == sample_keys((images.to(memory_format=torch.channels_last),), 4)[0].tolist()
    assert keys.tolist() == sample_keys((images.numpy(),), 4)[0].tolist()
    code = ("import sys, torch\nfrom loadtune.measure.fingerprint import sample_keys\n"
            "torch.manual_seed(0)\nprint(sample_keys((torch.rand(4, 3, 8, 8),), 4)[0].tolist())")
    torch.manual_seed(0)
    here = sample_keys((torch.rand(4, 3, 8, 8),), 4)[0].tolist()
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(there) == here


def test_the_loop_keys_each_counted_sample_outside_the_timed_parts():
    loader = [(torch.full((4, 2), float(i)), torch.arange(4 * i, 4 * i + 4)) for i in range(20)]
    ticks = iter(range(10_000))
    m = measure_loop(loader, lambda batch: None, warmup_batches=2, batches=5, repeats=2,
                     clock=lambda: float(next(ticks)))
    first, second = m.windows
    assert first.labels == tuple(range(8, 28)) and second.labels == tuple(range(28, 48))
    assert len(first.keys) == 20 and len(set(first.keys + second.keys)) == 40
    # One tick per part: the keys' time (the clock read after them) is in no part.
    assert first.wait_s == (1.0,) * 5 and first.step_s == (1.0,) * 5
    plain = measure_loop(loader, lambda batch: None, warmup_batches=2, batches=5, repeats=1, fingerprint=False)
    assert plain.windows[0].keys == () and plain.windows[0].labels == ()


def test_bytes_that_change_per_read_are_told_apart_from_stable_ones():
    kwargs = {"batch_size": 4, "num_workers": 0}
    assert stable_bytes(synthetic.sleep_cost(16, 0.0), kwargs) is True
    assert stable_bytes(synthetic.augmented_cost(16, 0.0), kwargs) is False
    assert stable_bytes(synthetic.sleep_cost_stream(16, 0.0), kwargs) is True


# --- the indices a sampler hands out --------------------------------------------------------------


def recorded_loader(dataset, **kwargs):
    from torch.utils.data import DataLoader

    kept, recorder = recording(dataset, kwargs)
    return DataLoader(dataset, **kept), recorder


def test_the_recorder_notes_each_epoch_as_the_dataloader_hands_it_out():
    loader, recorder = recorded_loader(synthetic.sleep_cost(10, 0.0), batch_size=4, shuffle=True, drop_last=True)
    assert len(loader) == 2
    labels = [next(iter(loader))[1]]  # one batch of an epoch, then a whole one
    labels += [batch[1] for batch in loader]
    first, whole = recorder.epochs()
    assert first.indices.tolist() == labels[0].tolist() and not first.complete
    assert first.size == 8, "10 samples less the incomplete last batch (drop_last), from the sampler's length"
    assert whole.complete and whole.size == 8 and whole.indices.tolist() == torch.cat(labels[1:]).tolist()
    assert whole.batch == 4 and not whole.replacement


def test_the_recorder_keeps_a_sampler_without_batches_or_a_custom_batch_sampler():
    from torch.utils.data import BatchSampler, SequentialSampler, WeightedRandomSampler

    dataset = synthetic.sleep_cost(6, 0.0)
    loader, recorder = recorded_loader(dataset, batch_size=None, sampler=WeightedRandomSampler([1.0] * 6, 6))
    assert len([sample for sample in loader]) == 6
    (epoch,) = recorder.epochs()
    assert epoch.complete and epoch.size == 6 and epoch.batch == 1 and epoch.replacement

    class Pairs(BatchSampler):  # a custom batch sampler: its epoch's samples are not known ahead
        def __iter__(self):
            return iter([[0, 1], [2, 3], [4, 5]])

    loader, recorder = recorded_loader(dataset, batch_sampler=Pairs(SequentialSampler(dataset), 2, False))
    next(iter(loader))
    assert [(e.indices.tolist(), e.size) for e in recorder.epochs()] == [([0, 1], None)]


def test_indices_that_are_not_integers_are_not_recorded_and_a_stream_has_no_sampler():
    from torch.utils.data import BatchSampler

    class Scaled(BatchSampler):  # (index, size) pairs, as multi-scale detection samplers give
        def __init__(self):
            pass

        def __iter__(self):
            return iter([[(0, 32), (1, 32)]])

        def __len__(self):
            return 1

    class Sized(torch.utils.data.Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, key):
            return torch.zeros(2)

    loader, recorder = recorded_loader(Sized(), batch_sampler=Scaled())
    assert len(list(loader)) == 1 and recorder.epochs() == ()
    assert recording(synthetic.sleep_cost_stream(8, 0.0), {"batch_size": 4}) == ({"batch_size": 4}, None)


# --- the runner: flagged trials stay in the file, out of racing, ranking and the pick ----------------


def keyed(throughput: float, batches: list[list[int]], starts: set[int]) -> Measurement:
    n = len(batches)
    per_batch = len(batches[0]) / throughput
    w = Window((0.2 * per_batch,) * n, (0.0,) * n, (0.8 * per_batch,) * n, tuple(len(b) for b in batches),
               tuple(i in starts for i in range(n)), keys=tuple(k for b in batches for k in b))
    return Measurement(TrialStart(0.1), (w,))


def test_the_runner_flags_a_faster_trial_that_repeats_samples_and_never_picks_it(tmp_path, write_config):
    config = tiny_config(measure={"warmup_batches": 1, "batches": 14, "timeout_s": 10, "min_repeats": 1,
                                  "repeats": 2})
    spec = load_config(write_config(config))
    unsplit = [b for batch in batched(DATASET) for b in (batch, batch)]
    by_workers = {1: (100.0, *epochs(DATASET, 2)), 0: (100.0, *epochs(DATASET, 2)),
                  2: (180.0, unsplit, set())}

    def execute(job, timeout_s):
        throughput, batches, starts = by_workers[job.trial.loader_kwargs["num_workers"]]
        return Outcome("ok", "", keyed(throughput, batches, starts), 0.5)

    runner = fake_runner(spec, tmp_path / "out.csv", execute, iterable=True)
    trials = [trial_for(spec.config, {}, False), trial_for(spec.config, {"num_workers": 0}, False),
              trial_for(spec.config, {"num_workers": 2}, False)]
    scores = runner.measure(trials, 1)
    assert not scores["num_workers=2"].ran, "a flagged trial is as one that did not run, for the strategies"
    assert decision(runner) is not None and runner.last_race.pick != "num_workers=2"
    written = {r.trial: r for r in read_records(tmp_path / "out.csv", required=())}
    assert written["num_workers=2"].measuring.data_check == "duplicates"
    assert written["baseline"].measuring.data_check == "same"
    assert written["num_workers=2"].reason.startswith("data_check duplicates: 50% of its samples came again")
    assert written["num_workers=2"].throughput == pytest.approx(180.0, rel=0.01), "its figures stay"
    placed = {r.trial: r for r in ranked(runner.runs, RankBy.THROUGHPUT, 0.03, runner.model.ties)}
    assert placed["num_workers=2"].rank is None and placed["baseline"].rank == 1
    assert placed["num_workers=2"].assessment.speedup == pytest.approx(1.8, rel=0.01)
    findings = runner.data.findings(runner.runs)
    assert [(f.trial, f.data_check) for f in findings.flagged] == [("num_workers=2", "duplicates")]
    assert findings.flagged[0].fixes == (WORKERS_FIX, SHARDS_FIX)


def by_indices(epochs: list[SamplerEpoch]) -> Measurement:
    """A trial whose batches carry nothing to key (augmented bytes, no labels): only its sampler's indices."""
    w = Window((0.02,) * 4, (0.0,) * 4, (0.08,) * 4, (4,) * 4, (True, False, False, False))
    return Measurement(TrialStart(0.1), (w,), epochs=LoaderEpochs(tuple(epochs)))


@pytest.mark.parametrize("repeating", [False, True])
def test_the_runner_checks_a_map_style_dataset_by_its_samplers_indices(tmp_path, write_config, repeating):
    config = tiny_config(measure={"warmup_batches": 1, "batches": 4, "timeout_s": 10, "min_repeats": 1,
                                  "repeats": 1})
    spec = load_config(write_config(config))

    def execute(job, timeout_s):
        seed = job.trial.loader_kwargs["num_workers"]
        order = permutation(seed)
        epoch = order[:15] + [order[0] if repeating else order[15]]
        return Outcome("ok", "", by_indices([handed_out(epoch)]), 0.5)

    runner = fake_runner(spec, tmp_path / "out.csv", execute, stable_bytes=False, iterable=False)
    runner.measure([trial_for(spec.config, {}, False), trial_for(spec.config, {"num_workers": 0}, False),
                    trial_for(spec.config, {"num_workers": 2}, False)], 1)
    written = read_records(tmp_path / "out.csv", required=())
    assert {r.measuring.data_check for r in written} == {"same"}, "keys could not tell, the indices do"
    notes = runner.data.findings(runner.runs).notes
    if repeating:
        assert notes == (RepeatingSampler(1, 16),)
        assert str(notes[0]) == ("the sampler hands out some indices twice within an epoch in every trial (1 of 16 "
                                 "in the trial that repeats least), so trials were compared with each other: give "
                                 "each index once per epoch, unless that is by design (oversampling)")
    else:
        assert notes == ()


def test_the_runner_compares_keys_when_a_trials_sampler_gave_no_indices(tmp_path, write_config):
    config = tiny_config(measure={"warmup_batches": 1, "batches": 14, "timeout_s": 10, "min_repeats": 1,
                                  "repeats": 1})
    spec = load_config(write_config(config))

    def execute(job, timeout_s):
        measurement = keyed(100.0, *epochs(DATASET, 2))
        if job.trial.loader_kwargs["num_workers"] == 2:  # a sampler of (index, size) pairs: nothing recorded
            return Outcome("ok", "", measurement, 0.5)
        recorded = LoaderEpochs((handed_out(DATASET, complete=True),))
        return Outcome("ok", "", dataclasses.replace(measurement, epochs=recorded), 0.5)

    runner = fake_runner(spec, tmp_path / "out.csv", execute, iterable=False)
    runner.measure([trial_for(spec.config, {}, False), trial_for(spec.config, {"num_workers": 2}, False)], 1)
    assert not runner.data.by_indices
    assert {r.measuring.data_check for r in read_records(tmp_path / "out.csv", required=())} == {"same"}


def test_repeats_keep_each_ranks_sampler_epochs_in_order():
    a, b, c, d = (handed_out([k]) for k in range(4))
    def rank(epoch: SamplerEpoch) -> Measurement:
        return Measurement(TrialStart(0.1), (), epochs=LoaderEpochs((epoch,)))

    both = merged([combine_ranks([rank(a), rank(b)]), combine_ranks([rank(c), rank(d)])])
    assert both.epochs.sampled == () and sampled(both) == [(a, c), (b, d)]


# --- real sweeps through the CLI -----------------------------------------------------------------


def sweep_json(write_config, tmp_path: Path, marker: str, factory: str, sweep: dict, loader: dict | None = None,
               kwargs: dict | None = None, *args: str) -> tuple[dict, dict]:
    """A small real sweep: its --json summary, and its CSV's records by trial."""
    config = tiny_config(
        dataset={"factory": f"loadtune.synthetic:{factory}",
                 "kwargs": {"num_samples": 24, "cost_s": 0.0005, **(kwargs or {})}},
        loader={"batch_size": 8, "num_workers": 0, **(loader or {})},
        sweep=sweep, step={"sleep_s": 0.002},
        measure={"warmup_batches": 2, "batches": 10, "repeats": 1, "timeout_s": 60})
    out = tmp_path / "out.csv"
    done = run_cli("sweep", str(write_config(config)), "--out", str(out), "--json", *args, marker=marker,
                   timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout), {r.trial: r for r in read_records(out)}


@pytest.mark.slow
def test_an_unsplit_stream_is_flagged_with_two_workers_or_more_and_never_recommended(write_config, tmp_path,
                                                                                     marker):
    summary, rows = sweep_json(write_config, tmp_path, marker, "unsplit_stream", {"num_workers": [1, 2, 4]})
    checks = {t: rows[t].measuring.data_check for t in ("baseline", "num_workers=1", "num_workers=2", "num_workers=4")}
    assert checks == {
        "baseline": "same", "num_workers=1": "same", "num_workers=2": "duplicates", "num_workers=4": "duplicates"}
    assert rows["num_workers=2"].rank is None and rows["num_workers=2"].status == "ok"
    assert summary["recommended"]["trial"] in ("baseline", "num_workers=1")
    flagged = {f["trial"]: f for f in summary["data_check"]["flagged"]}
    assert set(flagged) == {"num_workers=2", "num_workers=4"}
    assert WORKERS_FIX in flagged["num_workers=2"]["fixes"]


def checked(rows: dict) -> set:
    return {r.measuring.data_check for t, r in rows.items() if t != "ideal" and r.status == "ok"}


@pytest.mark.slow
def test_a_stream_split_between_workers_is_the_same(write_config, tmp_path, marker):
    summary, rows = sweep_json(write_config, tmp_path, marker, "sleep_cost_stream", {"num_workers": [1, 2, 4]})
    assert checked(rows) == {"same"} and summary["data_check"]["flagged"] == []
    assert summary["recommended"] is not None


@pytest.mark.slow
def test_a_shuffled_map_style_dataset_out_of_order_is_the_same(write_config, tmp_path, marker):
    summary, rows = sweep_json(write_config, tmp_path, marker, "sleep_cost", {"num_workers": [0], "in_order": [False]},
                               loader={"shuffle": True, "num_workers": 2})
    assert set(rows) >= {"baseline", "num_workers=0", "in_order=false"}
    assert checked(rows) == {"same"} and summary["recommended"] is not None


@pytest.mark.slow
def test_more_workers_than_shards_are_flagged(write_config, tmp_path, marker):
    summary, rows = sweep_json(write_config, tmp_path, marker, "sharded_stream", {"num_workers": [2, 3]},
                               kwargs={"num_shards": 2})
    assert (rows["baseline"].measuring.data_check, rows["num_workers=2"].measuring.data_check) == ("same", "same")
    assert rows["num_workers=3"].measuring.data_check == "duplicates"
    assert summary["recommended"]["trial"] != "num_workers=3"


@pytest.mark.slow
def test_two_ranks_sharded_by_loadtunes_distributed_sampler_are_the_same(write_config, tmp_path, marker):
    summary, rows = sweep_json(write_config, tmp_path, marker, "sleep_cost", {"num_workers": [1]},
                               {"shuffle": True}, {"num_samples": 25}, "--ranks", "2")
    assert checked(rows) == {"same"}, "25 samples over 2 ranks: the sampler's one padded sample is allowed"
    assert summary["recommended"] is not None


@pytest.mark.slow
def test_two_ranks_without_a_distributed_sampler_on_a_stream_are_duplicates(write_config, tmp_path, marker):
    summary, rows = sweep_json(write_config, tmp_path, marker, "unsplit_stream", {"num_workers": [1]},
                               None, None, "--ranks", "2")
    checked = {t: r for t, r in rows.items() if t != "ideal"}
    assert {r.measuring.data_check for r in checked.values()} == {"duplicates"}
    assert all("another rank" in r.reason for r in checked.values())
    assert summary["recommended"] is None
    assert RANKS_FIX in summary["data_check"]["flagged"][0]["fixes"]


# --- real trials of map-style datasets: the sampler's indices ------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("persistent", [False, True])
def test_the_recorder_sees_what_workers_are_handed_ahead_in_any_order(persistent):
    loader, recorder = recorded_loader(synthetic.sleep_cost(24, 0.0), batch_size=4, shuffle=True, num_workers=2,
                                       prefetch_factor=2, persistent_workers=persistent, in_order=False)
    it = iter(loader)
    first = [next(it)[1] for _ in range(2)]
    del it
    whole = [batch[1] for batch in loader]
    cut, complete = recorder.epochs()
    assert len(cut.indices) > 8, "drawn ahead for the workers' prefetching"
    assert set(torch.cat(first).tolist()) <= set(cut.indices.tolist()) and not cut.complete
    assert complete.complete and sorted(complete.indices.tolist()) == sorted(torch.cat(whole).tolist()) == \
        list(range(24))


def trial_measured(write_config, config: dict, changes: dict, ranks: int = 1) -> Measurement:
    """One trial of `config` with `changes`: in this process, or with ranks in a trial process."""
    spec = load_config(write_config(config))
    cfg = spec.config
    job = TrialJob(trial_for(cfg, changes, False), cfg.dataset, cfg.step, cfg.measure, "cpu", str(spec.base_dir),
                   os.getpid(), multiprocessing.get_all_start_methods()[0], ranks=ranks)
    if ranks == 1:
        return measure_here(job, None, SweepChannel())
    outcome = run_in_trial_process(job, timeout_s=120)
    assert outcome.status == "ok", outcome.reason
    return outcome.result


def small_trials(factory: str, kwargs: dict, loader: dict, epoch_batches: int | None = None) -> dict:
    return tiny_config(dataset={"factory": factory, "kwargs": kwargs}, loader=loader, step={"sleep_s": 0.001},
                       measure={"warmup_batches": 2, "batches": 6, "repeats": 1, "timeout_s": 60,
                                "epoch_batches": epoch_batches})


@pytest.mark.slow
def test_an_image_folder_with_random_crops_is_the_same_in_every_trial(write_config, tmp_path):
    from PIL import Image

    for label in ("cat", "dog", "fox"):
        (tmp_path / "images" / label).mkdir(parents=True)
        for i in range(3):
            pixels = np.random.default_rng((len(label), i)).integers(0, 256, (20, 24, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / "images" / label / f"{i}.png")
    config = small_trials("loadtune.demo:image_folder", {"root": str(tmp_path / "images"), "crop_px": 16},
                          {"batch_size": 2, "shuffle": True, "num_workers": 0})
    from loadtune.demo import image_folder

    assert stable_bytes(image_folder(str(tmp_path / "images"), 16), {"batch_size": 2}) is False, \
        "random crops: the samples' keys cannot tell"
    changes = {"baseline": {}, "num_workers=2": {"num_workers": 2},
               "persistent, out of order": {"num_workers": 2, "persistent_workers": True, "in_order": False}}
    deliveries = {name: handed(sampled(trial_measured(write_config, config, change)))
                  for name, change in changes.items()}
    for found in deliveries.values():
        assert found.epochs and all(epoch.tolist() == list(range(9)) for epoch in found.epochs)
        assert set(found.sizes) == {9}
    assert set(check_all(deliveries, "baseline").values()) == {Check("same")}


@pytest.mark.slow
def test_a_sampler_that_gives_an_index_twice_is_duplicates_beside_one_that_does_not(write_config):
    config = small_trials("tests.sampler_factories:repeating", {"num_samples": 24, "batch_size": 8},
                          {"batch_size": 8, "num_workers": 0})
    changes = {"baseline": {}, "num_workers=2": {"num_workers": 2}, "shuffle=true": {"shuffle": True}}
    deliveries = {name: handed(sampled(trial_measured(write_config, config, change)))
                  for name, change in changes.items()}
    checks = check_all(deliveries, "baseline")
    assert checks["shuffle=true"] == Check("same"), "shuffle replaces the factory's sampler"
    for name in ("baseline", "num_workers=2"):
        assert checks[name].verdict == "duplicates" and checks[name].causes == (REPEATED,)
        assert checks[name].reason.startswith("the sampler handed out ") and " against 0 of " in checks[name].reason
        assert checks[name].reason.endswith(" in shuffle=true"), "the reference: the trial that repeats least"
    assert fixes(checks["baseline"], iterable=False) == (SAMPLER_FIX,)


@pytest.mark.slow
@pytest.mark.parametrize("factory, verdict", [("ignoring_rank", "duplicates"), ("distributed", "same")])
def test_two_ranks_by_their_samplers_indices(write_config, factory, verdict):
    config = small_trials(f"tests.sampler_factories:{factory}", {"num_samples": 64, "batch_size": 8},
                          {"batch_size": 8, "num_workers": 1})
    measurement = trial_measured(write_config, config, {}, ranks=2)
    found = handed(sampled(measurement))
    assert found.ranks == 2 and found.exact
    check = check_all({"baseline": found}, "baseline")["baseline"]
    assert check.verdict == verdict
    if verdict == "duplicates":
        assert check.causes == (ACROSS_RANKS,) and fixes(check, iterable=False) == (RANKS_FIX,)


@pytest.mark.slow
def test_the_demos_random_augmentation_is_the_same_in_every_trial_of_a_sweep(write_config, tmp_path, marker):
    config = tiny_config(
        dataset={"factory": "loadtune.demo:synthetic_images",
                 "kwargs": {"num_images": 40, "crop_px": 32, "min_px": 40, "max_px": 64,
                            "cache_dir": str(tmp_path / "cache")}},
        loader={"batch_size": 4, "shuffle": True, "num_workers": 1, "prefetch_factor": 2},
        sweep={"num_workers": [0, 2], "prefetch_factor": [4]}, step={"sleep_s": 0.002},
        measure={"warmup_batches": 2, "batches": 6, "epoch_batches": 4, "repeats": 1, "timeout_s": 60})
    out = tmp_path / "out.csv"
    done = run_cli("sweep", str(write_config(config)), "--out", str(out), "--json", marker=marker, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {r.trial: r for r in read_records(out)}
    assert {"baseline", "num_workers=0", "num_workers=2", "prefetch_factor=4"} <= set(rows)
    assert checked(rows) == {"same"}
    assert json.loads(done.stdout)["data_check"] == {"flagged": [], "notes": []}
