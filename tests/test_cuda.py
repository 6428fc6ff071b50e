"""The accelerator path. The CUDA tests run only where CUDA is (benchmarks/gpu_check.sh runs
them on a GPU machine); the real-step config is also checked on CPU."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from tests.conftest import ANY_LOAD, run_cli, tiny_config

ROOT = Path(__file__).resolve().parents[1]
PARTS = str(Path(__file__).with_name("cuda_parts.py"))
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_the_resnet18_step_trains_on_the_batch():
    import sys

    sys.path.insert(0, str(ROOT / "configs"))
    try:
        from resnet18_step import make_step
    finally:
        sys.path.remove(str(ROOT / "configs"))
    step = make_step(device="cpu", num_classes=4)
    before = [p.detach().clone() for p in step.model.parameters()]
    step((torch.randn(4, 3, 64, 64), torch.tensor([0, 1, 2, 3])))
    changed = sum(bool((a != b).any()) for a, b in zip(before, step.model.parameters()))
    assert changed == len(before)  # forward, backward and an optimizer step touched every weight


@pytest.mark.slow
def test_the_resnet18_config_sweeps_on_cpu(tmp_path, marker):
    out = tmp_path / "resnet18.csv"
    result = run_cli("sweep", str(ROOT / "configs" / "resnet18.yaml"), "--device", "cpu", "--out", str(out),
                     "--set", "dataset.kwargs={num_images: 64, crop_px: 64}", "--set", "loader.batch_size=4",
                     "--set", "loader.num_workers=1", "--set", "sweep={num_workers: [0]}",
                     "--set", f"measure.max_outside_cpu={ANY_LOAD}",
                     "--batches", "3", "--warmup", "1", "--repeats", "1", marker=marker, timeout=300)
    assert result.returncode == 0, result.stderr
    df = pd.read_csv(out).set_index("trial")
    assert (df.status == "ok").all(), df.reason
    assert df.loc["baseline", "step_ms"] > 5  # a real model's step, not a stand-in


# --- on a GPU ------------------------------------------------------------------------------


@cuda
def test_a_pinned_copy_is_non_blocking_and_timed_on_the_device():
    from loadtune.parts.device import make_transfer

    batch = (torch.randn(64, 3, 224, 224).pin_memory(), torch.arange(64).pin_memory())
    transfer = make_transfer("cuda", pin_memory=True)
    moved = transfer(batch)
    assert moved[0].is_cuda and moved[1].is_cuda
    assert torch.equal(moved[1].cpu(), batch[1])
    copy_s = transfer.copy_s()
    assert 0 < copy_s < 1
    gb_per_s = batch[0].nbytes / copy_s / 1e9
    assert gb_per_s > 1, gb_per_s  # pinned host-to-device copies run at several GB/s or more


@cuda
@pytest.mark.slow
def test_pin_memory_rows_arrive_pinned_with_h2d_and_bandwidth(tmp_path, write_config, marker):
    config = tiny_config(
        dataset={"factory": "loadtune.synthetic:sleep_cost",
                 "kwargs": {"num_samples": 512, "cost_s": 0.0001, "sample_shape": [3, 128, 128]}},
        loader={"batch_size": 32, "num_workers": 2, "pin_memory": False},
        sweep={"pin_memory": [True]}, step={"sleep_s": 0.005}, device="cuda")
    out = tmp_path / "pinned.csv"
    result = run_cli("sweep", str(write_config(config)), "--out", str(out), marker=marker)
    assert result.returncode == 0, result.stderr
    df = pd.read_csv(out).set_index("trial")
    assert df.loc["pin_memory=true", "status"] == "ok"
    assert bool(df.loc["pin_memory=true", "pinned"]) is True
    assert bool(df.loc["baseline", "pinned"]) is False
    for trial in ("baseline", "pin_memory=true"):
        assert df.loc[trial, "h2d_ms"] > 0
        assert df.loc[trial, "h2d_gb_per_s"] > 0.5
    assert (df.device == "cuda").all()


@cuda
@pytest.mark.slow
def test_the_step_is_synchronised_so_gpu_work_is_timed(tmp_path, write_config, marker):
    """The step only queues 20 ms of GPU work; synchronised, step_ms shows it."""
    config = tiny_config(
        dataset={"factory": "loadtune.synthetic:sleep_cost", "kwargs": {"num_samples": 400, "cost_s": 0.0}},
        loader={"batch_size": 8, "num_workers": 1}, sweep={},
        step={"factory": f"{PARTS}:gpu_busy_step", "kwargs": {"busy_ms": 20.0}}, device="cuda")
    out = tmp_path / "synced.csv"
    started = time.monotonic()
    result = run_cli("sweep", str(write_config(config)), "--out", str(out), marker=marker)
    assert result.returncode == 0, result.stderr
    row = pd.read_csv(out).set_index("trial").loc["baseline"]
    assert row.step_ms > 16, row.step_ms
    assert row.h2d_ms < row.step_ms  # the step's kernels did not leak into the copy's time
    assert time.monotonic() - started < 240


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
@pytest.mark.slow
def test_two_ranks_on_two_gpus_use_nccl_and_their_own_device(tmp_path, write_config, marker):
    config = tiny_config(loader={"batch_size": 8, "num_workers": 1, "pin_memory": True}, sweep={}, device="cuda")
    out = tmp_path / "nccl.csv"
    result = run_cli("sweep", str(write_config(config)), "--ranks", "2", "--out", str(out), marker=marker)
    assert result.returncode == 0, result.stderr
    row = pd.read_csv(out).set_index("trial").loc["baseline"]
    assert row.status == "ok" and row.ranks == 2 and bool(row.pinned) is True
