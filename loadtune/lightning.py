"""A PyTorch Lightning callback that watches the run's train DataLoader(s) as it trains, and writes
the same results file `loadtune.watch` does (docs/watch.md)::

    from loadtune.lightning import WatchCallback
    trainer = lightning.Trainer(callbacks=[WatchCallback(out="results/watch-train.csv")])

Installed with `pip install loadtune-torch[lightning]`; this module (and Lightning) is imported only
by code that imports it. It subclasses `lightning.pytorch.Callback`, or, where only the older
`pytorch_lightning` package is installed, that package's Callback.

Which loaders: the ones the fit loop trains from, as the Trainer holds them after its own
processing (`trainer.train_dataloader`, a CombinedLoader's flattened loaders: a loader Lightning
re-made, e.g. with a DistributedSampler, is the one iterated and the one watched), and only while
the trainer trains (`trainer.training`), so the sanity check and validation (even of the same
loader object) are not counted. The watch starts at `on_fit_start`, since Lightning makes the first
epoch's iterator before `on_train_start`; it ends at `on_train_end`, or `on_exception` (the rows
measured so far, with the reason), or at `teardown` at the latest. Under DDP each rank watches its
own loaders and rank 0 writes one row per rank (RunWatch); only rank 0 says anything.

With `tune=True` each of those train loaders is tuned as `loadtune.tune` tunes a loader (docs/tune.md):
its settings tried while the fit trains, within `budget_s` seconds, the best kept for the rest of it;
the sanity check and validation still iterate the loader as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loadtune.training_process.frameworks import CallbackWatch, failed, flat_loaders, framework_class

if TYPE_CHECKING:
    from lightning.pytorch import Callback as _Callback
else:  # pytorch_lightning: the older package name
    _Callback = framework_class("loadtune.lightning", "PyTorch Lightning", "lightning",
                                ("lightning.pytorch", "Callback"), ("pytorch_lightning", "Callback"))


class WatchCallback(CallbackWatch, _Callback):
    """Watches the train DataLoader(s) of each `trainer.fit`: rows named `name` in `out` (default
    results/watch-NAME.csv), written every `every_s` seconds and when the training ends; with
    `tune=True`, tunes them within `budget_s` seconds."""

    WHO = "loadtune.lightning.WatchCallback"

    def _start(self, trainer: Any) -> None:
        def accepts(loader: Any) -> bool:
            if not trainer.training:
                return False
            return any(loader is train for train in flat_loaders(trainer.train_dataloader))

        self._watch.start(accepts)

    # --- Lightning's hooks ----------------------------------------------------------------------

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self._start(trainer)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if not self._watch.watching:
            self._start(trainer)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._watch.stop()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._watch.stop(failed(type(exception)))

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self._watch.watching:
            self._watch.stop()

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (ddp_spawn sends the callback to its processes) without a run in progress."""
        state = dict(self.__dict__)
        state["_watch"] = self._new_watch()
        return state
