"""loadtune.tune on the ranks of a data-parallel job: rank 0's word after each batch of the search
(switching.Agreement) through a store in memory, each rank run in turn (rank 0 never waits for the
others, so its words are all there when rank 1 reads them: every decision exact); then 2 real
ranks (torch.distributed, gloo on CPU, as torchrun starts them) switching at the same batches,
each serving its own share of every epoch once, in its sampler's order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

import loadtune
from loadtune.record.record import read_records
from loadtune.training_process import tune as tune_module
from loadtune.training_process.run import RunWatch, _Group
from loadtune.training_process.switching import Agreement, Word
from loadtune.training_process.tune import AGREE_PREFIX, Tuned, tuned_for
from loadtune.training_process.tuner import Tuner
from tests.rank_parts import on_a_free_port
from tests.test_tune import Indices, quick_patches

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")

ROOT = Path(__file__).resolve().parent.parent
WORLD = 2
SAMPLES = 480  # 240 a rank: 60 batches of 4 an epoch
BATCH = 4
EPOCHS = 3
STEP_S = 0.004  # each batch's step: a window of 0.05 s is about 12 batches
RANKS_TIMEOUT_S = 120

said: list[str] = []  # the lines the ranks of the in-memory job said


class MemoryStore:
    """The calls loadtune makes of a c10d store, in memory; a key never set is not waited for:
    its get fails at once, as a store's get fails at its timeout."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def set(self, key: str, value: str | bytes) -> None:
        self.data[key] = value.encode() if isinstance(value, str) else value

    def get(self, key: str) -> bytes:
        if key not in self.data:
            raise RuntimeError(f"Socket Timeout waiting for {key}")
        return self.data[key]

    def add(self, key: str, amount: int) -> int:
        value = int(self.data.get(key, b"0")) + amount
        self.data[key] = str(value).encode()
        return value

    def delete_key(self, key: str) -> bool:
        return self.data.pop(key, None) is not None

    def check(self, keys: list[str]) -> bool:
        return all(k in self.data for k in keys)

    def wait(self, keys: list[str], timeout: timedelta) -> None:
        if not self.check(keys):
            raise RuntimeError("timeout")

    def words(self) -> list[str]:
        return [k for k in self.data if k.startswith(AGREE_PREFIX)]


def test_a_word_is_read_by_every_other_rank_then_deleted():
    store = MemoryStore()
    leader, first, second = (Agreement(store, rank, 3, "run:loader", epoch=1) for rank in range(3))
    leader.post(5, Word({"num_workers": 2}, switch=True, settled=False))
    assert first.read(5) == Word({"num_workers": 2}, switch=True, settled=False)
    assert set(store.data) == {"run:loader:1:5", "run:loader:1:5:read"}, "kept until every other rank read it"
    assert second.read(5).switch and not store.data
    leader.post(6, Word({"num_workers": 1}, switch=False, settled=True))
    assert leader.done and first.read(6).settled and first.done and not second.done
    with pytest.raises(RuntimeError, match="Timeout"):  # another run's loader: not its words
        Agreement(store, 1, 3, "other run:loader", epoch=1).read(6)


@pytest.fixture
def quick(monkeypatch):
    """tests.test_tune.quick_patches for one test: every rank 0 run switches at the same batches."""
    quick_patches(monkeypatch.setattr)


def rank_of(tmp_path: Path, store: MemoryStore, rank: int, dataset: Any | None = None) -> Tuned:
    """Rank `rank` of 2 tuning its share of a shuffled epoch, its job's store `store`: its own
    results file of the same name (the words' keys name it)."""
    run = RunWatch(tmp_path / f"rank{rank}" / "run.csv", 60.0, say=lambda line, level: said.append(line),
                   sample_tree=False)
    run.job.group = _Group(rank, WORLD, store)
    data = dataset if dataset is not None else Indices(SAMPLES)
    sampler = DistributedSampler(data, num_replicas=WORLD, rank=rank, shuffle=True, seed=3)
    return tuned_for(DataLoader(data, batch_size=BATCH, sampler=sampler), run, "train", 100.0)


def train(tuned: Tuned, epochs: int = EPOCHS) -> list[dict[str, Any]]:
    """Each epoch: the sampler's order, the indices served, and the setting of each batch."""
    seen = []
    for epoch in range(epochs):
        tuned.sampler.set_epoch(epoch)
        order = list(tuned.sampler)
        got, settings = [], []
        for batch in tuned:
            got += [int(x) for x in batch]
            settings.append(tuned.label(tuned.settings))
            time.sleep(STEP_S)
        seen.append({"order": order, "got": got, "settings": settings})
    tuned.close()
    return seen


def switches(epochs: list[dict[str, Any]]) -> list[tuple[int, int, str]]:
    """(epoch, batch, setting) where the setting changed."""
    found, last = [], None
    for e, epoch in enumerate(epochs):
        for b, setting in enumerate(epoch["settings"]):
            if setting != last:
                found.append((e, b, setting))
                last = setting
    return found


@pytest.mark.slow
def test_every_rank_switches_at_rank_0_s_batches_and_serves_its_share_once(tmp_path, quick):
    store = MemoryStore()
    leader = rank_of(tmp_path, store, 0)
    first = train(leader)
    follower = rank_of(tmp_path, store, 1)
    second = train(follower)
    assert switches(first) == switches(second) and len(switches(first)) >= 5
    assert [e["settings"] for e in first] == [e["settings"] for e in second]
    assert all(e["got"] == e["order"] for e in first + second)
    assert sorted(first[0]["got"] + second[0]["got"]) == list(range(SAMPLES))
    assert leader.tuner.tried and not follower.tuner.tried, "rank 0 alone searches"
    assert follower.settings == leader.settings and follower.tuner.settled
    assert store.words() == [], "every word read and deleted"


@pytest.mark.slow
def test_a_setting_failing_on_rank_0_is_left_by_every_rank_at_the_next_batch(tmp_path, quick):
    store = MemoryStore()
    first = train(rank_of(tmp_path, store, 0, Indices(SAMPLES, fail_with_workers=2)))
    second = train(rank_of(tmp_path, store, 1))
    a, b = ([s for e in epochs for s in e["settings"]] for epochs in (first, second))
    differ = [i for i in range(len(a)) if a[i] != b[i]]
    assert len(differ) == 1 and b[differ[0]] == "num_workers=2, persistent_workers=true", \
        "rank 1 ran the batch rank 0 failed on"
    assert all(e["got"] == e["order"] for e in first + second)
    assert store.words() == []


@pytest.mark.slow
def test_a_setting_failing_on_another_rank_alone_is_left_there_for_the_one_before(tmp_path, quick):
    store = MemoryStore()
    said.clear()
    first = train(rank_of(tmp_path, store, 0))
    follower = rank_of(tmp_path, store, 1, Indices(SAMPLES, fail_with_workers=2))
    second = train(follower)
    assert all(e["got"] == e["order"] for e in first + second)
    assert any("rank 1: num_workers=2, persistent_workers=true failed on this rank (ValueError: no sample with 2 "
               "workers" in line and "back to num_workers=1, persistent_workers=true on this rank" in line
               for line in said)
    # rank 0 kept 6 workers, which never ran on rank 1: it keeps its own
    assert follower.settings["num_workers"] == 1 and follower.tuner.settled
    assert second[-1]["settings"][-1] == "num_workers=1, persistent_workers=true"
    assert store.words() == [], "it read rank 0's words to the settled one"


@pytest.mark.slow
def test_a_setting_failing_on_every_rank_ends_them_on_rank_0_s_kept_setting(tmp_path, quick):
    store = MemoryStore()
    leader = rank_of(tmp_path, store, 0, Indices(SAMPLES, fail_with_workers=2))
    first = train(leader)
    follower = rank_of(tmp_path, store, 1, Indices(SAMPLES, fail_with_workers=2))
    second = train(follower)
    assert all(e["got"] == e["order"] for e in first + second)
    # rank 0 keeps 1 worker made persistent; rank 1 ran 1 worker (not persistent) before 2 failed
    assert follower.settings == leader.settings == {"num_workers": 1, "prefetch_factor": 2,
                                                   "persistent_workers": True, "pin_memory": False}
    assert first[-1]["settings"] == second[-1]["settings"]


def test_no_word_from_rank_0_leaves_a_rank_on_its_setting_and_the_epoch_whole(tmp_path):
    said.clear()
    follower = rank_of(tmp_path, MemoryStore(), 1, Indices(40))
    (epoch,) = train(follower, epochs=1)
    assert epoch["got"] == epoch["order"] and set(epoch["settings"]) == {"baseline"}
    assert any("rank 1: no word from rank 0 after batch 1" in line and "tunes no more" in line for line in said)


@pytest.mark.slow
def test_rank_0_s_pipeline_model_is_fitted_to_its_own_row(tmp_path, monkeypatch):
    monkeypatch.setattr(tune_module, "MIN_WINDOW_S", 0.05)
    monkeypatch.setattr(tune_module, "WINDOWS_IN_BUDGET", 10**6)
    suggested: list = []
    monkeypatch.setattr(tune_module, "outside_since", lambda cores: lambda: None)  # the start's one window
    monkeypatch.setattr(Tuner, "suggest", lambda self, configs: suggested.extend(configs))
    said.clear()
    train(rank_of(tmp_path, MemoryStore(), 0, Indices(200)), epochs=1)
    assert suggested, "its row is `train: baseline rank 0`: " + " / ".join(said)


def test_ranks_without_a_process_group_each_tune_on_their_own(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    said.clear()
    run = RunWatch(tmp_path / "run.csv", 60.0, say=lambda line, level: said.append(line), sample_tree=False)
    tuned = tuned_for(DataLoader(Indices(8), batch_size=4), run, "train")
    assert tuned.ranks is None and "rank 1 of 2 without a process group: each rank tunes on its own" in said[0]
    run.close()


# --- real ranks ------------------------------------------------------------------------------------


def rank_main(out: str, record: str) -> None:
    """One rank of a 2-rank job started as torchrun starts it (env://): a tuned loader over its
    DistributedSampler's share, the ranks in step (an all-reduce each batch, as DDP's gradients),
    what it saw written to `record`."""
    import torch.distributed as dist

    quick_patches(setattr)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=RANKS_TIMEOUT_S))
    data = Indices(SAMPLES)
    sampler = DistributedSampler(data, shuffle=True, seed=3)
    tuned = loadtune.tune(DataLoader(data, batch_size=BATCH, sampler=sampler), out=out, budget_s=100, name="train")
    tick = torch.ones(1)
    seen = []
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        order, got, settings = list(sampler), [], []
        for batch in tuned:
            got += [int(x) for x in batch]
            settings.append(tuned.label(tuned.settings))
            time.sleep(STEP_S)
            dist.all_reduce(tick)
        seen.append({"order": order, "got": got, "settings": settings})
    tuned.close()
    dist.barrier()  # every word read
    ranks, left = tuned.ranks, []
    assert ranks is not None
    for ranks.epoch in range(1, EPOCHS + 1):  # each word's key and its count of readers
        left += [k for b in range(1, SAMPLES // WORLD // BATCH + 1) for k in (ranks.key(b), f"{ranks.key(b)}:read")
                 if ranks.store.check([k])]
    Path(record).write_text(json.dumps({"epochs": seen, "left": left, "tried": len(tuned.tuner.tried)}))
    dist.destroy_process_group()



def launch_ranks(tmp_path: Path, out: Path) -> tuple[list[subprocess.Popen], list[tuple[str, str]]]:
    """rank_main on WORLD ranks started as torchrun starts them (env://, a free port)."""
    code = "import sys; from tests.test_tune_ranks import rank_main; rank_main(*sys.argv[1:])"

    def start(port: int) -> list[subprocess.Popen]:
        out.unlink(missing_ok=True)  # what a try on a port taken meanwhile left
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(WORLD),
               "TORCHELASTIC_RUN_ID": uuid.uuid4().hex, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
        return [subprocess.Popen([sys.executable, "-c", code, str(out), str(tmp_path / f"rank{r}.json")],
                                 cwd=tmp_path, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(WORLD)]

    return on_a_free_port(start, RANKS_TIMEOUT_S)


@pytest.mark.slow
def test_two_real_ranks_switch_at_the_same_batches_and_rank_0_writes_both(tmp_path):
    out = tmp_path / "run.csv"
    ranks, done = launch_ranks(tmp_path, out)
    assert all(rank.returncode == 0 for rank in ranks), "\n".join(err[-3000:] for _, err in done)
    first, second = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD))
    assert switches(first["epochs"]) == switches(second["epochs"]) and len(switches(first["epochs"])) >= 5
    assert [e["settings"] for e in first["epochs"]] == [e["settings"] for e in second["epochs"]]
    assert all(e["got"] == e["order"] for e in first["epochs"] + second["epochs"])
    for e in range(EPOCHS):
        assert sorted(first["epochs"][e]["got"] + second["epochs"][e]["got"]) == list(range(SAMPLES))
    assert first["tried"] >= 5 and second["tried"] == 0 and first["left"] == [] == second["left"]
    assert "rank 0 searches and every rank changes setting at the same batch" in " ".join(done[0][1].split())
    assert "tuning" not in done[1][1], "rank 1 follows without a word"
    rows = read_records(out)
    names = {rank: sorted((r.trial or "").rsplit(" rank ", 1)[0] for r in rows if r.measuring.dist_rank == rank)
             for rank in range(WORLD)}
    assert set(names) == {0, 1} and names[0] == names[1] and "train" in names[0]
    assert not list(tmp_path.glob("run.rank*.csv"))


def test_a_rank_beside_others_on_the_machine_does_not_count_them_as_neighbours(tmp_path, monkeypatch):
    # The job's other ranks use the cores too: a tuned run alone measures what others use, one of
    # several ranks here does not (each of their windows would be measured again).
    for env, checked in (({}, True), ({"LOCAL_WORLD_SIZE": "2"}, False), ({"WORLD_SIZE": "2"}, False)):
        for key in ("LOCAL_WORLD_SIZE", "WORLD_SIZE", "RANK"):
            monkeypatch.delenv(key, raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        run = RunWatch(tmp_path / "run.csv", 60.0, say=lambda line, level: None, sample_tree=False)
        tuned = tuned_for(DataLoader(Indices(8), batch_size=4), run, "train")
        assert (tuned.tuner._asks.outside is not None) == checked, env
        run.close()
