"""The framework callbacks (loadtune.lightning, loadtune.transformers) with the real frameworks on the
CPU and tiny models: each in a process of its own (their import cost and global state stay out of
this one), each writing the watched file `loadtune.watch` writes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from loadtune.core.errors import ConfigError
from loadtune.core.kinds import Status
from loadtune.record.record import read_records
from loadtune.record.watched import loader_file
from loadtune.training_process import hook
from loadtune.training_process.frameworks import FrameworkWatch, batches_of, flat_loaders
from loadtune.training_process.run import RunWatch
from loadtune.training_process.watch import _MEASURE

# Batches a watched loader leaves uncounted first (one worker, not persistent: no per-worker extra).
WARMUP = _MEASURE.warmup_batches + _MEASURE.extra_warmup_for(1, False, 40)

# The data both trainings train on: 320 samples, 1 ms each to load, batches of 8 (40 an epoch).
DATA = """
import sys, time, torch
from torch.utils.data import Dataset

class Sleepy(Dataset):
    def __len__(self): return 320
    def __getitem__(self, i):
        time.sleep(0.001)
        return torch.full((16,), float(i % 7)), i % 4
"""

LIGHTNING = DATA + """
import lightning.pytorch as pl
from torch.utils.data import DataLoader
from loadtune.lightning import WatchCallback

class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(16, 4)
    def training_step(self, batch, i):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x), y)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

def main():
    model = Tiny()
    before = model.layer.weight.detach().clone()
    train = DataLoader(Sleepy(), batch_size=8, num_workers=1, shuffle=True)
    # validation (and the sanity check) from the very same loader object: never watched
    val = train
    callback = WatchCallback(out="run.csv", every_s=0.2, name="fit")
    extra = [Boom()] if "fail" in sys.argv else []
    ddp = "ddp" in sys.argv
    trainer = pl.Trainer(max_epochs=3, accelerator="cpu", devices=2 if ddp else 1, callbacks=[callback, *extra],
                         strategy="ddp" if ddp else "auto", use_distributed_sampler=True,
                         enable_progress_bar=False, logger=False, enable_checkpointing=False,
                         enable_model_summary=False, num_sanity_val_steps=2, limit_val_batches=3)
    trainer.fit(model, train, val)
    if trainer.global_rank:
        return
    print("global_step", trainer.global_step)
    print("changed", bool((model.layer.weight != before).any()))
    from torch.utils.data import DataLoader as Plain
    print("restored", Plain.__iter__.__qualname__)

class Boom(pl.Callback):
    def on_train_batch_end(self, trainer, module, outputs, batch, i):
        if trainer.current_epoch == 1 and i == 20:
            raise ValueError("the data went bad")

if __name__ == "__main__":
    main()
"""

TRANSFORMERS = DATA + """
from transformers import Trainer, TrainingArguments
from loadtune.transformers import WatchCallback

class Named(Dataset):
    def __init__(self): self.inner = Sleepy()
    def __len__(self): return len(self.inner)
    def __getitem__(self, i):
        x, y = self.inner[i]
        return {"x": x, "labels": torch.tensor(y)}

class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(16, 4)
        self.steps = 0
    def forward(self, x, labels=None):
        self.steps += self.training
        if "fail" in sys.argv and self.steps == 61:  # the second epoch's 21st batch
            raise ValueError("the data went bad")
        logits = self.layer(x)
        return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}

def main():
    model = Tiny()
    before = model.layer.weight.detach().clone()
    args = TrainingArguments(output_dir="out", per_device_train_batch_size=8, per_device_eval_batch_size=8,
                             num_train_epochs=3, learning_rate=0.1, dataloader_num_workers=1,
                             report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True,
                             eval_strategy="epoch", logging_strategy="no", seed=0)
    data = Named()
    trainer = Trainer(model=model, args=args, train_dataset=data, eval_dataset=data,  # the same dataset
                      callbacks=[WatchCallback(out="run.csv", every_s=0.2, name="hf")])
    trainer.train()
    print("global_step", trainer.state.global_step)
    print("changed", bool((model.layer.weight != before).any()))
    from torch.utils.data import DataLoader
    print("restored", DataLoader.__iter__.__qualname__)

if __name__ == "__main__":
    main()
"""


def _train(tmp_path: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(script))
    return subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)


def _check_row(row, name: str, batches: int, epoch_batches: int = 40):
    assert row.status == Status.WATCHED and row.trial == name
    assert row.throughput > 0 and 0 <= row.wait_ratio <= 1 and row.figures.step_ms > 0
    assert (row.settings.num_workers, row.settings.prefetch_factor, row.settings.batch_size) == (1, 2, 8)
    assert row.assessment.fetch_ms is not None and row.assessment.fetch_ms > 0  # the worker's fetches counted
    assert row.measuring.run_epoch_batches == epoch_batches and row.run.dataset_len == 320
    # Every train batch counted once (no validation batch, none twice), the sweep's warm-up aside.
    assert row.measuring.batches == batches - WARMUP


@pytest.mark.slow
def test_the_lightning_callback_watches_the_train_loader_of_a_real_fit(tmp_path):
    pytest.importorskip("lightning")
    done = _train(tmp_path, LIGHTNING)
    assert done.returncode == 0, done.stderr
    assert "changed True" in done.stdout and "global_step 120" in done.stdout
    assert "restored DataLoader.__iter__" in done.stdout  # the hook undone after the fit
    (row,) = read_records(tmp_path / "run.csv")
    # Lightning stops asking at an epoch's length: each epoch's last step ends unseen, uncounted.
    _check_row(row, "fit", 3 * 40 - 3)
    assert (row.measuring.dist_rank, row.measuring.ranks) == (0, 1) and not row.reason
    assert "loadtune: watched fit: wait ratio" in done.stderr


@pytest.mark.slow
def test_a_lightning_fit_that_raises_keeps_its_rows_and_says_why(tmp_path):
    pytest.importorskip("lightning")
    done = _train(tmp_path, LIGHTNING, "fail")
    assert done.returncode != 0 and "ValueError: the data went bad" in done.stderr
    (row,) = read_records(tmp_path / "run.csv")
    # the first epoch, then batches 0-20 of the second (the 21st raised at its step's end)
    _check_row(row, "fit", 40 - 1 + 20)
    assert row.reason == "the training raised ValueError"


@pytest.mark.slow
def test_lightning_ddp_ranks_write_one_file_with_a_row_per_rank(tmp_path):
    pytest.importorskip("lightning")
    done = _train(tmp_path, LIGHTNING, "ddp")
    assert done.returncode == 0, done.stderr
    assert "global_step 60" in done.stdout  # each rank trains half of each epoch
    rows = sorted(read_records(tmp_path / "run.csv"), key=lambda r: r.measuring.dist_rank)
    assert [(r.trial, r.measuring.dist_rank, r.measuring.ranks) for r in rows] == \
        [("fit rank 0", 0, 2), ("fit rank 1", 1, 2)]
    for row in rows:  # Lightning's DistributedSampler: 20 batches a rank each epoch
        _check_row(row, row.trial, 3 * 20 - 3, epoch_batches=20)
    assert done.stderr.count("loadtune: watched") == 1  # rank 0 alone speaks


@pytest.mark.slow
def test_the_transformers_callback_watches_the_trainers_train_loader(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    done = _train(tmp_path, TRANSFORMERS)
    assert done.returncode == 0, done.stderr
    assert "changed True" in done.stdout and "global_step 120" in done.stdout
    assert "restored DataLoader.__iter__" in done.stdout
    (row,) = read_records(tmp_path / "run.csv")
    # accelerate's shard reads one batch ahead, so it sees each epoch end: every step counted
    _check_row(row, "hf", 3 * 40)
    assert (row.measuring.dist_rank, row.measuring.ranks) == (0, 1) and not row.reason
    assert "loadtune: watched hf: wait ratio" in done.stderr
    # the loader accelerate re-made around the Trainer's batch sampler: the user's settings
    kept = json.loads(loader_file(tmp_path / "run.csv").read_text())["hf"]["loader_kwargs"]
    assert (kept["batch_size"], kept["shuffle"], kept["drop_last"]) == (8, True, False)


@pytest.mark.slow
def test_a_transformers_training_that_raises_keeps_its_rows_and_says_why(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    done = _train(tmp_path, TRANSFORMERS, "fail")
    assert done.returncode != 0 and "ValueError: the data went bad" in done.stderr
    # The Trainer calls no callback when it raises: the run ends with the process, its reason
    # from Python's own record of the error.
    (row,) = read_records(tmp_path / "run.csv")
    assert row.status == Status.WATCHED and row.trial == "hf" and row.throughput > 0
    assert row.reason == "the training raised ValueError"
    # the first epoch, then the second's first 21 (the shard asks its loader one batch ahead)
    assert 40 + 19 - WARMUP <= row.measuring.batches <= 40 + 22 - WARMUP
    assert "loadtune: watched hf: wait ratio" in done.stderr


@pytest.mark.slow
def test_importing_loadtune_imports_no_framework():
    code = ("import sys, loadtune, loadtune.training_process.frameworks; "
            "print(sorted(m for m in ('lightning', 'pytorch_lightning', 'transformers', 'accelerate') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# --- the shared part, without a framework -------------------------------------------------------


def test_the_keywords_are_checked_when_the_callback_is_made(tmp_path):
    for bad in (0, -1.0, float("nan"), "60", True):
        with pytest.raises(ConfigError, match="every_s"):
            FrameworkWatch(out=tmp_path / "run.csv", every_s=bad, name="train", who="cb")
    with pytest.raises(ConfigError, match="name"):
        FrameworkWatch(out=None, every_s=1.0, name=" ", who="cb")
    assert FrameworkWatch(out=None, every_s=1, name="my run", who="cb").out == Path("results/watch-my-run.csv")


def test_the_loaders_of_a_trainers_collection_each_once():
    class Combined:
        def __init__(self, flattened):
            self.flattened = flattened

    a, b, c = object(), object(), object()
    assert list(flat_loaders(a)) == [a]
    assert list(flat_loaders({"x": [a, b], "y": (c, a)})) == [a, b, c]
    assert list(flat_loaders(Combined([b, c]))) == [b, c]
    assert list(flat_loaders(None)) == []


def test_a_loader_remade_around_a_batch_sampler_keeps_the_batches_settings():
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler

    data = list(range(20))
    shuffled = DataLoader(data, batch_sampler=BatchSampler(RandomSampler(data), 4, drop_last=True))
    settings: dict = {"batch_size": None, "shuffle": False}
    batches_of(settings, shuffled)
    assert settings == {"batch_size": 4, "drop_last": True, "shuffle": True}
    in_order = DataLoader(data, batch_sampler=BatchSampler(SequentialSampler(data), 5, drop_last=False))
    settings = {"batch_size": None, "shuffle": False}
    batches_of(settings, in_order)
    assert settings == {"batch_size": 5, "drop_last": False, "shuffle": False}
    settings = {"batch_size": 8}
    batches_of(settings, in_order)  # a loader with its own batch size: as it is
    assert settings == {"batch_size": 8}


def test_only_the_accepted_loader_is_watched_and_an_outer_watch_comes_back(tmp_path):
    from torch.utils.data import DataLoader

    train, other = DataLoader(list(range(64)), batch_size=4), DataLoader(list(range(8)), batch_size=4)
    outer = RunWatch(tmp_path / "outer.csv", 60.0, say=lambda line, level: None, sample_tree=False)
    hook.watch_every_loader(outer)  # as `loadtune watch SCRIPT` does
    try:
        lines: list[str] = []
        watch = FrameworkWatch(out=tmp_path / "run.csv", every_s=60.0, name="fit", who="cb")
        run = watch.start(lambda loader: loader is train)
        run.say, run.sample_tree = (lambda line, level: lines.append(line)), False
        for _ in range(2):
            assert sum(len(b) for b in train) == 64
            assert sum(len(b) for b in other) == 8
        assert [w.loader for w in run.loaders.watches] == [train]  # the other loader: no watch of this run
        rows = watch.stop()
        counted = 2 * 16 - _MEASURE.warmup_batches  # each epoch run to its end: every step seen
        assert [(r.trial, r.status, r.measuring.batches) for r in rows] == [("fit", Status.WATCHED, counted)]
        assert watch.run is None and run.closed and "watched fit" in lines[-1]
        assert hook._run is outer  # the script's own watch again
        list(other)
        assert [w.loader for w in outer.loaders.watches] == [other]
        assert watch.stop() == []  # twice: nothing more
    finally:
        hook.stop_watching()
        outer.close()
