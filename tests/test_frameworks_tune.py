"""The framework callbacks' `tune=True` with the real frameworks on the CPU and tiny models, in this
process (so test_tune's `quick` search applies): the train loader tuned as `loadtune.tune` tunes it,
each sample served once an epoch, the rows named after the callback, validation left as it is."""

from __future__ import annotations

import pickle
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from loadtune.core.errors import ConfigError
from loadtune.core.kinds import Status
from loadtune.record.record import read_records
from loadtune.record.watched import read_loader_info
from loadtune.training_process import hook
from loadtune.training_process.frameworks import FrameworkWatch
from tests.test_tune import quick  # noqa: F401 - the fixture, used by name

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.filterwarnings("ignore::FutureWarning")]

SAMPLES = 240  # 60 batches of 4 an epoch
EPOCHS = 5
BUDGET_S = 1.0


class Indexed(Dataset):
    """The train data: each sample carries its index; a little time each, so workers pay."""

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(0.0005)
        return torch.full((8,), float(i % 5)), torch.tensor(i)


class Held(Dataset):
    """The validation data: each sample says where it was loaded (-1: the training process)."""

    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        info = get_worker_info()
        return torch.zeros(8), torch.tensor(-1 if info is None else info.id)


@pytest.fixture
def hooked():
    """DataLoader.__iter__ as it was after the test, and no tuned loader (nor its workers) left."""
    yield
    hook.stop_watching()
    hook._tuned.clear()


def check_tuned_rows(out: Path, name: str, dataset: type) -> None:
    """A `tuned` row per setting tried and one `watched` row, the kept setting's, all named after
    the callback; every loader in the file the train data's (no validation loader)."""
    rows = read_records(out)
    tried = [r for r in rows if r.status == Status.TUNED]
    assert tried and all((r.trial or "").startswith(f"{name}: ") for r in tried)
    assert tried[0].trial == f"{name}: baseline" and tried[0].settings.num_workers == 0
    assert [r.trial for r in rows if r.status == Status.WATCHED] == [name], "the loader has no row of its own"
    assert {info.dataset for info in read_loader_info(out).values()} == {f"{__name__}:{dataset.__name__}"}


def check_served(served: list[int]) -> None:
    """Each epoch served every index exactly once."""
    assert len(served) == EPOCHS * SAMPLES
    for epoch in range(EPOCHS):
        assert sorted(served[epoch * SAMPLES:(epoch + 1) * SAMPLES]) == list(range(SAMPLES))


def tiny_lightning_module() -> Any:
    import lightning.pytorch as pl

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(8, 1)
            self.served: dict[int, list[int]] = defaultdict(list)
            self.loaded_in: list[int] = []

        def training_step(self, batch: Any, i: int) -> torch.Tensor:
            x, index = batch
            self.served[self.current_epoch].extend(index.tolist())
            return self.layer(x).pow(2).mean()

        def validation_step(self, batch: Any, i: int) -> None:
            self.loaded_in.extend(batch[1].tolist())

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return Tiny()


@pytest.mark.slow
@pytest.mark.usefixtures("quick", "hooked")
def test_the_lightning_callback_tunes_the_train_loader_of_a_real_fit(tmp_path):
    pl = pytest.importorskip("lightning.pytorch")
    from loadtune.lightning import WatchCallback

    model = tiny_lightning_module()
    train = DataLoader(Indexed(), batch_size=4, shuffle=True)
    val = DataLoader(Held(), batch_size=4)
    callback = WatchCallback(out=tmp_path / "w.csv", tune=True, budget_s=BUDGET_S)
    trainer = pl.Trainer(max_epochs=EPOCHS, accelerator="cpu", callbacks=[callback], default_root_dir=tmp_path,
                         enable_progress_bar=False, logger=False, enable_checkpointing=False,
                         enable_model_summary=False)
    sent = pickle.loads(pickle.dumps(callback))  # as ddp_spawn sends it
    assert (sent.tune, sent.budget_s, sent._watch.tune, sent._watch.budget_s) == (True, BUDGET_S, True, BUDGET_S)
    trainer.fit(model, train, val)
    assert trainer.global_step == EPOCHS * SAMPLES // 4 and callback.run is None
    check_served([i for epoch in range(EPOCHS) for i in model.served[epoch]])
    # the sanity check and each epoch's validation, all loaded here: validation never tuned
    assert len(model.loaded_in) == 8 + EPOCHS * 40 and set(model.loaded_in) == {-1}
    check_tuned_rows(tmp_path / "w.csv", "train", Indexed)
    assert train.num_workers == 0, "the user's loader itself is left as it was"
    with pytest.raises(ConfigError, match="^loadtune.lightning.WatchCallback: budget_s must be"):
        WatchCallback(tune=True, budget_s=0)


class Named(Dataset):
    """A sample as the Hugging Face Trainer takes it: keywords of the model's forward."""

    def __init__(self, inner: Dataset) -> None:
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        x, index = self.inner[i]
        return {"x": x, "labels": torch.tensor(0.0), "index": index}


class Recording(torch.nn.Module):
    """A linear model that records the indices it trains on and where its evaluation's samples were loaded."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
        self.served: list[int] = []
        self.loaded_in: list[int] = []

    def forward(self, x: torch.Tensor, labels: torch.Tensor, index: torch.Tensor) -> dict[str, torch.Tensor]:
        (self.served if self.training else self.loaded_in).extend(index.tolist())
        out = self.layer(x).squeeze(-1)
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}


@pytest.mark.slow
@pytest.mark.usefixtures("quick", "hooked")
def test_the_transformers_callback_tunes_the_trainers_train_loader(tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from loadtune.transformers import WatchCallback

    model = Recording()
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, per_device_eval_batch_size=4,
        num_train_epochs=EPOCHS, learning_rate=0.01, dataloader_num_workers=0, report_to=[], save_strategy="no",
        use_cpu=True, disable_tqdm=True, eval_strategy="epoch", logging_strategy="no", seed=0)
    callback = WatchCallback(out=tmp_path / "w.csv", tune=True, budget_s=BUDGET_S, name="hf")
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Named(Indexed()),
                                   eval_dataset=Named(Held()), callbacks=[callback])
    trainer.train()
    assert trainer.state.global_step == EPOCHS * SAMPLES // 4 and callback.run is None
    check_served(model.served)
    assert len(model.loaded_in) == EPOCHS * 40 and set(model.loaded_in) == {-1}
    check_tuned_rows(tmp_path / "w.csv", "hf", Named)


# --- the keywords, without a framework -------------------------------------------------------------


def test_the_tuning_keywords_are_checked_when_the_callback_is_made(tmp_path):
    for bad in (0, -1.0, float("nan"), "60", True):
        with pytest.raises(ConfigError, match="^cb: budget_s must be a number of seconds above 0"):
            FrameworkWatch(out=tmp_path / "run.csv", every_s=1.0, name="train", who="cb", tune=True, budget_s=bad)
    for bad in (1, "yes", None, ["num_workers"]):
        with pytest.raises(ConfigError, match="^cb: tune must be True or False"):
            FrameworkWatch(out=tmp_path / "run.csv", every_s=1.0, name="train", who="cb", tune=bad)
    watch = FrameworkWatch(out=None, every_s=1.0, name="train", who="cb", tune=True, budget_s=5)
    assert (watch.tune, watch.budget_s) == (True, 5.0)


@pytest.mark.slow
@pytest.mark.usefixtures("quick", "hooked")
def test_a_tuned_loader_gets_no_plain_watch_and_its_rows_take_the_callbacks_name(tmp_path):
    train, other = DataLoader(Indexed(), batch_size=8), DataLoader(Held(), batch_size=8)
    watch = FrameworkWatch(out=tmp_path / "run.csv", every_s=60.0, name="fit", who="cb", tune=True, budget_s=0.3)
    run = watch.start(lambda loader: loader is train)
    run.say, run.sample_tree = (lambda line, level: None), False
    for _ in range(2):
        assert sorted(int(i) for _, index in train for i in index) == list(range(SAMPLES))
        assert len(list(other)) == 5
    assert all(w.loader is not train and w.loader is not other for w in run.loaders.watches)
    rows = watch.stop()
    assert rows and {r.trial for r in rows if r.status == Status.TUNED} >= {"fit: baseline"}
    assert all(r.trial == "fit" or (r.trial or "").startswith("fit: ") for r in rows)
    assert hook.current() is None


@pytest.mark.slow
@pytest.mark.usefixtures("quick", "hooked")
def test_a_second_training_over_the_same_loader_is_tuned_anew_and_each_leaves_no_workers(tmp_path):
    import psutil

    train = DataLoader(Indexed(), batch_size=8)
    before = {p.pid for p in psutil.Process().children(recursive=True)}  # other tests' in this process
    for n in (1, 2):
        watch = FrameworkWatch(out=tmp_path / f"run{n}.csv", every_s=60.0, name="fit", who="cb", tune=True,
                               budget_s=0.3)
        run = watch.start(lambda loader: loader is train)
        run.say, run.sample_tree = (lambda line, level: None), False
        for _ in range(3):
            assert sorted(int(i) for _, index in train for i in index) == list(range(SAMPLES))
        rows = watch.stop()
        assert any(r.status == Status.TUNED for r in rows) and any(r.trial == "fit" for r in rows)
        left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
        _, left = psutil.wait_procs(left, timeout=10)  # a worker told to stop, still exiting on a loaded machine
        assert not left, f"the kept setting's workers outlived the training: {[p.cmdline()[-2:] for p in left]}"
        assert hook.current() is None and train not in hook._tuned
