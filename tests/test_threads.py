"""Thread settings as loader keys: applied in the training process and in every worker, swept
like any key, and written to the CSV."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from loadtune.asked.config import load_config
from loadtune.asked.plan import ofat_plan
from tests.conftest import run_cli, tiny_config

pytestmark = pytest.mark.slow


def _reports(folder: Path, where: str) -> set[tuple[int, int]]:
    found = set()
    for path in folder.glob(f"{where}-*"):
        torch_threads, pools = path.read_text().split()
        found.add((int(torch_threads), int(pools)))
    return found


def test_worker_threads_are_set_in_every_worker_and_main_threads_in_the_loop(write_config, tmp_path, marker):
    folder = tmp_path / "reports"
    folder.mkdir()
    config = tiny_config(dataset={"factory": "tests.fault_datasets:make_thread_reporter",
                                  "kwargs": {"folder": str(folder)}},
                         loader={"batch_size": 8, "num_workers": 2, "worker_threads": 3, "main_threads": 2},
                         sweep={}, measure={"warmup_batches": 1, "batches": 5, "repeats": 1, "timeout_s": 60})
    out = tmp_path / "t.csv"
    done = run_cli("sweep", str(write_config(config)), "--out", str(out), marker=marker)
    assert done.returncode == 0, done.stderr
    assert _reports(folder, "worker") == {(3, 3)}, "torch and the OpenMP/BLAS pools at 3 in each worker"
    rows = pd.read_csv(out).set_index("trial")
    assert rows.loc["baseline", "worker_threads"] == 3 and rows.loc["baseline", "main_threads"] == 2
    said = " ".join(done.stdout.split())  # the answer, wrapped at spaces, as one line
    assert "torch.set_num_threads(2) in the training process" in said
    assert "threadpoolctl.threadpool_limits(3) in worker_init_fn" in said


def test_thread_keys_are_swept_like_any_key(write_config, tmp_path, marker):
    config = tiny_config(loader={"batch_size": 8, "num_workers": 1},
                         sweep={"worker_threads": [1, 2], "main_threads": [1]},
                         measure={"warmup_batches": 1, "batches": 5, "repeats": 1, "timeout_s": 60})
    path = write_config(config)
    names = [t.name for t in ofat_plan(load_config(path).config, False)]
    assert names == ["baseline", "worker_threads=1", "worker_threads=2", "main_threads=1"]
    out = tmp_path / "s.csv"
    done = run_cli("sweep", str(path), "--out", str(out), marker=marker)
    assert done.returncode == 0, done.stderr
    rows = pd.read_csv(out).set_index("trial")
    assert rows.loc["worker_threads=2", "worker_threads"] == 2 and pd.isna(rows.loc["baseline", "worker_threads"])
    assert rows.loc["main_threads=1", "main_threads"] == 1
    # Combinations of the two keys the sweep did not measure are the model's predicted rows.
    assert set(rows[rows.status != "predicted"]["status"]) == {"ok"}


def test_worker_threads_without_workers_is_a_skipped_row(write_config):
    config = tiny_config(loader={"batch_size": 8}, sweep={"worker_threads": [2]})
    (trial,) = [t for t in ofat_plan(load_config(write_config(config)).config, False) if t.changed == "worker_threads"]
    assert trial.skipped and "num_workers=0" in trial.skip_reason
