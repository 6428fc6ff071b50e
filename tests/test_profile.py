from __future__ import annotations

import json
from collections import Counter

import pytest

from loadtune.asked.config import load_config
from loadtune.core.errors import LoadtuneError
from loadtune.profile import ProfileResult, profile_run

SAMPLE_COST_S = 0.002  # the dataset sleeps this long per sample: 16 ms a batch of 8, in one worker
STEP_S = 0.004  # the step is a sleep of this long


def tiny(write_config, **loader):
    return load_config(write_config({
        "name": "tiny-profile",
        "dataset": {"factory": "loadtune.synthetic:sleep_cost",
                    "kwargs": {"num_samples": 64, "cost_s": SAMPLE_COST_S}},
        "loader": {"batch_size": 8, "num_workers": 1, **loader},
        "step": {"sleep_s": STEP_S},
        "measure": {"warmup_batches": 2, "warmup_batches_per_worker": 0},  # batch counts below exact
        "device": "cpu",
    }))


@pytest.mark.slow
def test_profile_writes_a_trace_with_the_wait_and_step_regions(write_config, tmp_path):
    trace = tmp_path / "out" / "trace.json"
    batches = 10
    # 64 samples / batch 8 = 8 batches an epoch. The 2 warm-up batches (the first included)
    # are batches 1-2, the profiled ones 3-12: the second epoch starts at batch 9, inside.
    result = profile_run(tiny(write_config), batches=batches, trace_path=trace, device="cpu")
    assert isinstance(result, ProfileResult)
    assert result.trace_path == trace
    assert result.device == "cpu"
    assert result.warmup_batches == 2
    assert result.batches == batches and result.samples == batches * 8
    assert result.epochs_started == 1

    # The trace is valid JSON with one region per profiled batch and part; the warm-up
    # batches run before the profiler starts, and on CPU nothing is copied, so no h2d region.
    events = json.loads(trace.read_text())["traceEvents"]
    counts = Counter(e.get("name") for e in events if e.get("ph") == "X")
    assert counts["loadtune.wait"] == batches
    assert counts["loadtune.step"] == batches
    assert counts["loadtune.h2d"] == 0
    assert "loadtune.wait" in result.table and "loadtune.step" in result.table

    # The times follow the config's costs: a 4 ms sleep per step (plus a generous allowance
    # for a loaded machine), no copy on CPU, and a wait that is at least the loading the one
    # worker cannot have done before the profiled batches (at most 2 batches prefetched plus
    # 1 being built) and could not hide behind the steps.
    assert result.h2d_s == 0
    assert STEP_S <= result.step_s / batches < STEP_S + 0.05
    least_loading_s = (batches - 3) * 8 * SAMPLE_COST_S
    assert result.wait_s >= least_loading_s - result.step_s
    assert result.wait_s / batches < 1.0

    assert "batch_size=8" in result.dataloader and "num_workers=1" in result.dataloader
    lines = result.summary_lines()
    assert any(line.lstrip().startswith("wait") for line in lines)
    assert any(str(trace) in line for line in lines)


def test_profile_without_trace_and_without_workers(write_config, capsys):
    result = profile_run(tiny(write_config, num_workers=0), batches=3, trace_path=None, device="cpu")
    assert result.trace_path is None
    assert result.samples == 24 and result.total_s > 0
    assert "cpu_time_total" not in result.table and "CPU total" in result.table
    out = capsys.readouterr()
    assert out.out == ""  # the library prints nothing itself


def test_profile_refuses_bad_batches_and_reports_failing_datasets(write_config):
    spec = tiny(write_config)
    with pytest.raises(LoadtuneError, match="--batches"):
        profile_run(spec, batches=0, trace_path=None, device="cpu")
    broken = load_config(write_config({
        "dataset": {"factory": "loadtune.synthetic:sleep_cost",
                    "kwargs": {"num_samples": 4, "cost_s": 0.0, "sample_shape": [-1]}},
        "loader": {"batch_size": 2},
        "step": {"sleep_s": 0.0},
        "device": "cpu",
    }, name="broken.yaml"))
    with pytest.raises(LoadtuneError, match="broken.yaml.*failed while profiling"):
        profile_run(broken, batches=2, trace_path=None, device="cpu")
