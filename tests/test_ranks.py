"""Data-parallel ranks: real ranks through torch.distributed (gloo on CPU), by --ranks and by
torchrun, on tiny datasets; the combination of ranks' figures with exact numbers."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pandas as pd
import pytest
import yaml

from loadtune.core.errors import ConfigError
from loadtune.decide.stats import summarize
from loadtune.record.measurement import Measurement, TrialStart, Window, combine_ranks
from loadtune.sweep_process.launch import STOPPED_BY_PEER, Outcome
from loadtune.sweep_process.torchrun import combine_outcomes, launched, refuse_nested_ranks
from tests.conftest import MARKER_VAR, processes_with, run_cli, tiny_config, wait_until
from tests.rank_parts import on_a_free_port

PARTS = str(Path(__file__).with_name("rank_parts.py"))
STEP_S = 0.02
BATCH = 8


def window(wait, step, samples=8, starts=None) -> Window:
    n = len(wait)
    return Window(tuple(wait), (0.0,) * n, tuple(step), (samples,) * n, tuple(starts or (False,) * n))


# --- combining ranks: exact --------------------------------------------------------------


def test_combined_ranks_sum_throughput_and_keep_the_slowest_rank():
    fed = Measurement(TrialStart(0.1), (window([0.01] * 4, [0.03] * 4),))  # wait ratio 0.25
    starved = Measurement(TrialStart(0.3),
                          (window([0.03] * 4, [0.01] * 4, starts=(True, False, False, False)),))  # 0.75
    combined = combine_ranks([fed, starved])
    assert combined.windows[0].samples == (16,) * 4
    assert combined.windows[0].epoch_start == (True, False, False, False)
    assert combined.start.first_batch_s == pytest.approx(0.3)
    stats = summarize(combined)
    assert stats.ranks == 2
    assert stats.throughput.mean == pytest.approx(16 / 0.04)  # 200 + 200 samples/s
    assert stats.wait_ratio.mean == pytest.approx(0.5)
    assert stats.wait_ratio_max_rank == pytest.approx(0.75)


def test_ranks_must_count_the_same_batches():
    with pytest.raises(ValueError):
        combine_ranks([Measurement(TrialStart(0.1), (window([0.01] * 4, [0.03] * 4),)),
                       Measurement(TrialStart(0.1), (window([0.01] * 3, [0.03] * 3),))])


def test_a_failed_rank_fails_the_run_and_is_named_over_the_ranks_it_stopped():
    m = Measurement(TrialStart(0.1), (window([0.01] * 2, [0.03] * 2),))
    outcomes = [Outcome("failed", STOPPED_BY_PEER, None, 2.0),
                Outcome("failed", "RuntimeError: [pair.cc:561] Connection closed by peer [127.0.0.1]:1", None, 1.0),
                Outcome("failed", "RuntimeError: boom (at dataset index 7)", None, 1.5)]
    combined = combine_outcomes(outcomes)
    assert combined.status == "failed"
    assert combined.reason == "rank 2: RuntimeError: boom (at dataset index 7)"
    assert combined.wall_s == 2.0
    ok = combine_outcomes([Outcome("ok", "", m, 1.0), Outcome("ok", "", m, 1.2)])
    assert ok.status == "ok" and ok.result.windows[0].samples == (16, 16)


def test_more_ranks_than_gpus_are_refused():
    from loadtune.sweep_process.setup import check_ranks

    with pytest.raises(ConfigError, match="--ranks 2 on cuda: each rank uses a CUDA device of its own"):
        check_ranks(2, "cuda", 1)
    check_ranks(1, "cuda", 1)
    check_ranks(4, "cpu", 0)


def test_ranks_under_torchrun_are_refused(monkeypatch):
    for name, value in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "localhost",
                        "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(name, value)
    assert launched()
    with pytest.raises(ConfigError, match="--ranks 2 under torchrun"):
        refuse_nested_ranks(2)
    refuse_nested_ranks(1)


@pytest.mark.slow
def test_building_the_launch_config_leaves_cuda_usable_in_forked_ranks(tmp_path):
    """torch marks a process whose CUDA runtime was asked anything, and its forked children
    cannot use CUDA: the launcher's config must not ask (it would, for NUMA bindings)."""
    code = (
        "import multiprocessing as mp, sys, torch\n"
        "from loadtune.trial_process.ranks import launch_config\n"
        f"config = launch_config(2, {str(tmp_path)!r})\n"
        "assert config.numa_options is None and config.nproc_per_node == 2\n"
        "def child(q): q.put(torch.cuda._is_in_bad_fork())\n"
        "ctx = mp.get_context('fork'); q = ctx.Queue(); p = ctx.Process(target=child, args=(q,)); p.start()\n"
        "bad = q.get(timeout=60); p.join()\n"
        "sys.exit(1 if bad else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stderr


def test_ranks_write_beside_the_one_rank_csv(tmp_path):
    from loadtune.asked.config import load_config
    from loadtune.asked.options import default_output

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({**tiny_config(), "output": "out/run.csv"}))
    spec = load_config(path, [], 1.0)
    assert default_output(spec) == tmp_path / "out" / "run.csv"
    assert default_output(dataclasses.replace(spec, ranks=2)) == tmp_path / "out" / "run-r2.csv"
    plain = dataclasses.replace(spec, config=spec.config.model_copy(update={"output": None}), ranks=4)
    assert default_output(plain).name.endswith("-x1-r4.csv")


# --- real ranks ---------------------------------------------------------------------------


def rank_config(step_kwargs: dict | None = None, sweep: dict | None = None, figures: bool = False, **measure) -> dict:
    """Cheap data (0.2 ms a sample), batch 8, a rank-aware step (tests/rank_parts.py);
    `figures` as for tiny_config."""
    return tiny_config(
        figures,
        dataset={"factory": "loadtune.synthetic:sleep_cost", "kwargs": {"num_samples": 400, "cost_s": 0.0002}},
        loader={"batch_size": BATCH, "num_workers": 1},
        sweep={} if sweep is None else sweep,
        step={"factory": f"{PARTS}:rank_step", "kwargs": step_kwargs or {"sleep_s": {0: STEP_S, 1: STEP_S}}},
        measure={"warmup_batches": 2, "batches": 20, "repeats": 1, "timeout_s": 60, **measure},
    )


UNEVEN_STEP_S = 0.01


@pytest.fixture(scope="module")
def uneven_ranks(tmp_path_factory):
    """One sweep on 2 ranks (--ranks 2) for the tests of its figures below: each rank's step a
    10 ms sleep ending in an all_reduce, built in a process group (as a DDP model is); rank 1's
    samples cost 5 ms (40 ms a batch, one worker), rank 0's none."""
    folder = tmp_path_factory.mktemp("uneven-ranks")
    config = rank_config({"sleep_s": {0: UNEVEN_STEP_S, 1: UNEVEN_STEP_S}, "require_group": True}, figures=True)
    config["dataset"] = {"factory": f"{PARTS}:rank_cost", "kwargs": {"num_samples": 400, "cost_s": {1: 0.005}}}
    out = folder / "uneven.csv"
    mark = f"uneven-ranks-{uuid.uuid4().hex[:8]}"
    path = folder / "uneven.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    result = run_cli("sweep", str(path), "--ranks", "2", "--out", str(out), marker=mark)
    assert wait_until(lambda: not processes_with(mark), timeout_s=5), "processes left running"
    return out, result


@pytest.mark.slow
@pytest.mark.serial
def test_two_ranks_run_at_once_and_their_throughput_is_summed(uneven_ranks):
    out, result = uneven_ranks
    assert result.returncode == 0, result.stderr
    assert "2 ranks" in result.stdout
    df = pd.read_csv(out).set_index("trial")
    assert set(df[df.asked_by.isna()].index) == {"baseline", "ideal"}, "and what the verdict's advice asks for"
    assert (df.status == "ok").all() and (df.ranks == 2).all()
    # One rank alone cannot pass BATCH / UNEVEN_STEP_S = 800 samples/s: two at once can. The
    # ideal shows it (each rank's step a 10 ms sleep, fed from memory; 1600 at best); the
    # baseline's loading is slower on rank 1 by design.
    one_rank_most = BATCH / UNEVEN_STEP_S
    assert df.loc["ideal", "throughput"] > 1.3 * one_rank_most
    assert df.loc["baseline", "wait_ratio_max_rank"] >= df.loc["baseline", "wait_ratio"] - 1e-9
    # Both ranks' own rows, beside the CSV; their throughputs add up to the trial's (ranks that
    # step together take the same time for each batch: the sum and the trial's figure agree
    # but for rounding, where averaging instead of summing would be off by half).
    per_rank = pd.read_csv(out.with_suffix(".ranks.csv"))
    assert f"{out.with_suffix('.ranks.csv')} (per rank)" in " ".join(result.stdout.split())  # wrapped at spaces
    for trial in ("baseline", "ideal"):
        rows = per_rank[per_rank.trial == trial]
        assert sorted(rows.dist_rank) == [0, 1]
        assert rows.throughput.sum() == pytest.approx(df.loc[trial, "throughput"], rel=0.05)
        assert rows.wait_ratio.max() == pytest.approx(df.loc[trial, "wait_ratio_max_rank"], abs=1e-3)


@pytest.mark.slow
@pytest.mark.serial
def test_a_slower_fed_rank_shows_in_wait_ratio_max_rank(uneven_ranks):
    """Rank 1 waits for its 40 ms batches most of the time, rank 0 only for the all_reduce."""
    out, result = uneven_ranks
    assert result.returncode == 0, result.stderr
    row = pd.read_csv(out).set_index("trial").loc["baseline"]
    assert row.wait_ratio_max_rank > 0.5
    assert row.wait_ratio_max_rank > row.wait_ratio + 0.2


@pytest.mark.slow
@pytest.mark.serial
def test_the_all_reduce_makes_a_fast_rank_wait_for_the_slow_one(tmp_path, write_config, marker):
    """Rank 0's step takes no time and rank 1's 40 ms: with an all_reduce ending every step,
    rank 0's steps last as long as rank 1's, so the mean step is about 40 ms, not 20."""
    config = rank_config({"sleep_s": {0: 0.0, 1: 0.04}}, figures=True)
    out = tmp_path / "skew.csv"
    result = run_cli("sweep", str(write_config(config)), "--ranks", "2", "--out", str(out), marker=marker)
    assert result.returncode == 0, result.stderr
    row = pd.read_csv(out).set_index("trial").loc["baseline"]
    assert row.status == "ok"
    assert row.step_ms > 32, row.step_ms


@pytest.mark.slow
def test_a_failing_rank_fails_the_trial_without_hanging_the_others(tmp_path, write_config, marker):
    config = rank_config({"sleep_s": {0: 0.005, 1: 0.005}, "fail_rank": 1, "fail_at": 4},
                         sweep={"num_workers": [0]}, timeout_s=120)
    out = tmp_path / "fail.csv"
    started = time.monotonic()
    result = run_cli("sweep", str(write_config(config)), "--ranks", "2", "--out", str(out), marker=marker)
    took = time.monotonic() - started
    # No trial ran: one `Error:` line, exit 1, the rows in the CSV.
    assert result.returncode == 1 and "Error: no trial ran successfully" in result.stderr, result.stderr
    df = pd.read_csv(out).set_index("trial")
    for trial in ("baseline", "num_workers=0"):
        assert df.loc[trial, "status"] == "failed"
        assert df.loc[trial, "reason"].startswith("rank 1 failed: RuntimeError: step failed on rank 1 at call 4")
    assert df.loc["ideal", "status"] == "failed"
    assert took < 60, f"a failing rank held the sweep for {took:.0f}s (trial timeout 120s)"


@pytest.mark.slow
def test_a_rank_killed_by_a_signal_is_named(tmp_path, write_config, marker):
    config = rank_config({"sleep_s": {0: 0.005, 1: 0.005}, "fail_rank": 1, "fail_at": 4, "kill": True},
                         timeout_s=120)
    out = tmp_path / "killed.csv"
    result = run_cli("sweep", str(write_config(config)), "--ranks", "2", "--out", str(out), marker=marker)
    assert result.returncode == 1 and "Error: no trial ran successfully" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    reason = pd.read_csv(out).set_index("trial").loc["baseline", "reason"]
    assert reason.startswith("rank 1 "), reason
    assert "SIGKILL" in reason, reason


@pytest.mark.slow
def test_parts_built_for_ranks_and_a_share_too_small_for_a_batch(tmp_path, write_config, marker):
    """A dataset factory that asks for its rank is built in a process group even at the
    preflight; 12 samples over 2 ranks with batch 8 and drop_last leave each rank no batch."""
    config = rank_config(sweep={})
    config["dataset"] = {"factory": f"{PARTS}:rank_sharded", "kwargs": {"num_samples": 400}}
    out = tmp_path / "sharded.csv"
    result = run_cli("sweep", str(write_config(config)), "--ranks", "2", "--out", str(out), marker=marker)
    assert result.returncode == 0, result.stderr
    assert pd.read_csv(out).set_index("trial").loc["baseline", "status"] == "ok"

    config = rank_config(sweep={})
    config["dataset"]["kwargs"]["num_samples"] = 12
    config["loader"]["drop_last"] = True
    out = tmp_path / "share.csv"
    result = run_cli("sweep", str(write_config(config, "share.yaml")), "--ranks", "2", "--out", str(out),
                     marker=marker)
    assert result.returncode == 1 and "Error: no trial ran successfully" in result.stderr, result.stderr
    reason = pd.read_csv(out).set_index("trial").loc["baseline", "reason"]
    assert "larger than each rank's share of the dataset (6 of its 12 samples over 2 ranks)" in reason, reason


# --- the sweep itself under torchrun --------------------------------------------------------


def torchrun(*args: str, marker: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200", MARKER_VAR: marker}
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           "-m", "loadtune", *args],
                          env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_a_sweep_launched_by_torchrun_runs_every_trial_on_every_rank(tmp_path, write_config, marker):
    out = tmp_path / "torchrun.csv"
    result = torchrun("sweep", str(write_config(rank_config({"sleep_s": {0: 0.0, 1: 0.04}}))), "--out", str(out),
                      marker=marker)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("Recommended:") == 1  # rank 0 reports; the other follows
    df = pd.read_csv(out).set_index("trial")
    assert (df.status == "ok").all() and (df.ranks == 2).all()
    assert df.loc["baseline", "step_ms"] > 32  # the ranks' trial processes all_reduce together


@pytest.mark.slow
def test_a_failing_rank_under_torchrun_fails_the_trial_and_the_sweep_goes_on(tmp_path, write_config, marker):
    config = rank_config({"sleep_s": {0: 0.005, 1: 0.005}, "fail_rank": 1, "fail_at": 4}, timeout_s=120)
    out = tmp_path / "torchrun-fail.csv"
    started = time.monotonic()
    result = torchrun("sweep", str(write_config(config)), "--out", str(out), marker=marker)
    # No trial ran: rank 0 ends with one `Error:` line and exit 1, which torchrun passes on.
    assert result.returncode != 0 and "Error: no trial ran successfully" in result.stderr, result.stderr[-3000:]
    assert time.monotonic() - started < 90
    row = pd.read_csv(out).set_index("trial").loc["baseline"]
    assert row.status == "failed"
    assert row.reason.startswith("rank 1: RuntimeError: step failed on rank 1"), row.reason



def two_nodes(*args: str, marker: str, timeout: float = 300) -> list[subprocess.CompletedProcess]:
    """Two torchrun agents on this host standing in for two machines: --nnodes 2, one process
    each, a c10d rendezvous on localhost; both started at once, as on two machines."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200", MARKER_VAR: marker}

    def start(port: int) -> list[subprocess.Popen]:
        return [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node",
                                  "1", "--rdzv_backend", "c10d", "--rdzv_endpoint", f"localhost:{port}",
                                  "--rdzv_id", f"{marker}-{port}", "-m", "loadtune", *args], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]

    agents, done = on_a_free_port(start, timeout)
    return [subprocess.CompletedProcess(agent.args, agent.returncode, out, err)
            for agent, (out, err) in zip(agents, done)]


@pytest.mark.slow
def test_two_nodes_run_every_trial_on_both_and_rank_0_writes_one_csv(tmp_path, write_config, marker):
    out = tmp_path / "nodes.csv"
    config = rank_config({"sleep_s": {0: 0.005, 1: 0.005}}, sweep={"num_workers": [0]})
    first, second = two_nodes("sweep", str(write_config(config)), "--out", str(out), marker=marker)
    assert first.returncode == 0 and second.returncode == 0, (first.stderr + second.stderr)[-3000:]
    assert (first.stdout + second.stdout).count("Recommended:") == 1, "the global rank 0 alone reports"
    df = pd.read_csv(out).set_index("trial")
    assert {"baseline", "num_workers=0"} <= set(df.index)
    assert (df.status == "ok").all() and (df.ranks == 2).all(), "every trial ran on both nodes"
    assert not list(tmp_path.glob("*.csv.tmp")) and not list(tmp_path.glob(".*.lock"))


@pytest.mark.slow
def test_a_node_whose_trial_fails_is_named_and_the_sweep_goes_on(tmp_path, write_config, marker):
    out = tmp_path / "nodes-fail.csv"
    config = rank_config({"sleep_s": {0: 0.005, 1: 0.005}, "fail_rank": 1, "fail_at": 4}, timeout_s=120)
    started = time.monotonic()
    first, second = two_nodes("sweep", str(write_config(config)), "--out", str(out), marker=marker)
    # No trial ran: every node ends as rank 0 does, with exit 1 (one that ended 0 would wait at
    # torchrun's exit barrier for the other), and only rank 0 says why.
    assert first.returncode != 0 and second.returncode != 0, (first.stderr + second.stderr)[-3000:]
    assert "Error: no trial ran successfully" in first.stderr + second.stderr
    assert time.monotonic() - started < 150
    row = pd.read_csv(out).set_index("trial").loc["baseline"]
    assert row.status == "failed" and row.reason.startswith("rank 1: RuntimeError: step failed on rank 1"), row.reason
