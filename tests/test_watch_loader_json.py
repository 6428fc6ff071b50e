"""A watched loader's keywords that are objects (collate_fn, worker_init_fn, a sampler of its own,
a generator) are kept in NAME.loader.json, named: a function that imports back as
"module:qualname" (a script's own by its file), any other by its own name. `loadtune predict` on
the run's CSV then pastes a DataLoader line that keeps the script's collate_fn."""

from __future__ import annotations

import functools
import json
import sys
import textwrap

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, RandomSampler

from loadtune.parts.factory import load_callable
from loadtune.record.settings import dataloader_line, paste_settings
from loadtune.record.watched import LoaderInfo, kept_settings, loader_file, read_loader_info
from loadtune.training_process.probe import Counting, callable_spec, loader_objects
from loadtune.training_process.watch import LoaderFacts
from tests.conftest import run_cli

DATA = [torch.zeros(2) for _ in range(8)]


def pad_collate(batch):
    return torch.stack(batch)


def seed_worker(worker_id):
    torch.manual_seed(worker_id)


class PadCollate:
    def __call__(self, batch):
        return torch.stack(batch)


def test_an_importable_function_is_named_module_and_qualname_and_imports_back():
    spec = callable_spec(pad_collate)
    assert spec == f"{__name__}:pad_collate"
    assert load_callable(spec) is pad_collate
    assert callable_spec(torch.stack) == "torch:stack", "a module's export under its own name"


def test_a_function_that_cannot_be_imported_is_named_without_a_module():
    def local_collate(batch):
        return batch

    assert callable_spec(local_collate) == "local_collate"
    assert callable_spec(lambda batch: batch) == "<lambda>"
    assert callable_spec(functools.partial(pad_collate)) == "partial(pad_collate, ...)"
    assert callable_spec(PadCollate()) == "PadCollate(...)"
    assert ":" not in callable_spec(local_collate) + callable_spec(PadCollate())


def test_a_loader_s_objects_are_named_and_its_defaults_left_out():
    loader = DataLoader(DATA, batch_size=2, collate_fn=pad_collate, worker_init_fn=seed_worker,
                        sampler=DistributedSampler(DATA, num_replicas=2, rank=0), generator=torch.Generator())
    assert loader_objects(loader) == {"collate_fn": f"{__name__}:pad_collate",
                                      "worker_init_fn": f"{__name__}:seed_worker",
                                      "sampler": "DistributedSampler", "generator": "Generator"}
    assert loader_objects(DataLoader(DATA, batch_size=2, shuffle=True)) == {}
    plain_batches = DataLoader(DATA, batch_sampler=BatchSampler(RandomSampler(DATA), 2, False))
    assert loader_objects(plain_batches) == {"batch_sampler": "BatchSampler"}
    assert loader_objects(object()) == {}


def test_the_watch_s_own_worker_init_fn_is_not_taken_for_the_user_s():
    loader = DataLoader(DATA, batch_size=2, num_workers=1, worker_init_fn=seed_worker)
    Counting(loader).install(loader)
    assert isinstance(loader.worker_init_fn, functools.partial), "the watch wrapped it"
    assert loader_objects(loader)["worker_init_fn"] == f"{__name__}:seed_worker"


def test_the_paste_line_keeps_the_collate_fn_by_its_name():
    facts = LoaderFacts.of(DataLoader(DATA, batch_size=2, collate_fn=pad_collate, drop_last=True))
    assert facts.loader_kwargs["collate_fn"] == f"{__name__}:pad_collate" and facts.loader_kwargs["drop_last"]
    kept, aside = kept_settings(LoaderInfo(loader_kwargs=facts.loader_kwargs))
    line = dataloader_line(paste_settings({"batch_size": 2, "num_workers": 2}, kept))
    assert line == "DataLoader(dataset, batch_size=2, num_workers=2, drop_last=True, collate_fn=pad_collate)"
    assert aside == []


SCRIPT = """
import time, torch
from torch.utils.data import DataLoader, Dataset

class Ragged(Dataset):
    def __len__(self): return 240
    def __getitem__(self, i):
        time.sleep(0.0005)
        return torch.ones(1 + i % 5)

def pad_collate(batch):
    width = max(len(x) for x in batch)
    return torch.stack([torch.nn.functional.pad(x, (0, width - len(x))) for x in batch])

def seed_worker(worker_id):
    torch.manual_seed(worker_id)

def main():
    loader = DataLoader(Ragged(), batch_size=8, num_workers=1, collate_fn=pad_collate,
                        worker_init_fn=seed_worker, drop_last=True)
    for epoch in range(3):
        for batch in loader:
            time.sleep(0.002)
    print("trained")

if __name__ == "__main__":
    main()
"""


@pytest.mark.slow
def test_predict_on_a_watched_run_pastes_the_script_s_collate_fn(tmp_path):
    script = tmp_path / "train_with_pad.py"
    script.write_text(textwrap.dedent(SCRIPT))
    done = run_cli("watch", "--out", "run.csv", "--every", "0.2", script.name, cwd=tmp_path)
    assert done.returncode == 0 and "trained" in done.stdout, done.stderr
    (info,) = read_loader_info(tmp_path / "run.csv").values()
    kwargs = info.loader_kwargs
    assert kwargs["collate_fn"] == f"{script.resolve()}:pad_collate"
    assert kwargs["worker_init_fn"] == f"{script.resolve()}:seed_worker"
    assert json.loads(loader_file(tmp_path / "run.csv").read_text())["Ragged"]["argv"] == []
    saved_path = sys.path[:]
    try:
        assert load_callable(kwargs["collate_fn"]).__name__ == "pad_collate", "the spec imports back"
    finally:
        sys.modules.pop("train_with_pad", None)
        sys.path[:] = saved_path
    predicted = run_cli("predict", "run.csv", cwd=tmp_path)
    assert predicted.returncode == 0, predicted.stderr
    said = " ".join(predicted.stdout.split())
    paste = said[said.index("Paste (each rank): DataLoader("):]
    assert "drop_last=True, collate_fn=pad_collate, worker_init_fn=seed_worker)" in paste
