from __future__ import annotations

import json

import pytest

from loadtune.config import load_config
from loadtune.errors import LoadtuneError
from loadtune.profile import ProfileResult, profile_run

REGIONS = ("loadtune.wait", "loadtune.h2d", "loadtune.step")


def tiny(write_config, **loader):
    return load_config(write_config({
        "name": "tiny-profile",
        "dataset": {"factory": "loadtune.synthetic:sleep_cost",
                    "kwargs": {"num_samples": 64, "cost_s": 0.001}},
        "loader": {"batch_size": 8, "num_workers": 1, **loader},
        "step": {"sleep_s": 0.002},
        "measure": {"warmup_batches": 2},
        "device": "cpu",
    }))


def test_profile_writes_a_trace_with_the_three_regions(write_config, tmp_path):
    trace = tmp_path / "out" / "trace.json"
    # 64 samples / batch 8 = 8 batches an epoch: 2 warm-up + 10 profiled crosses an epoch end.
    result = profile_run(tiny(write_config), batches=10, trace_path=trace, device="cpu")
    assert isinstance(result, ProfileResult)
    assert result.trace_path == trace
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e.get("name") for e in events}
    assert set(REGIONS) <= names
    for region in REGIONS:
        assert region in result.table
    assert result.batches == 10 and result.samples == 80 and result.epochs_started >= 1
    assert result.wait_s > 0 and result.h2d_s > 0 and result.step_s > 0
    assert result.step_s >= 10 * 0.002 * 0.9  # the 2 ms sleep step, 10 times
    shares = [share for _, share in result.groups.values()]
    assert sum(shares) == pytest.approx(1.0)
    assert result.wait_share + result.h2d_share + result.step_share == pytest.approx(1.0)
    assert result.device == "cpu"
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
