"""A Hugging Face `Trainer` callback that watches the Trainer's train DataLoader as it trains, and
writes the same results file `loadtune.watch` does (docs/watch.md)::

    from loadtune.transformers import WatchCallback
    trainer = transformers.Trainer(..., callbacks=[WatchCallback(out="results/watch-train.csv")])

Installed with `pip install loadtune-torch[transformers]`; this module (and Transformers) is
imported only by code that imports it.

Which loader: the one the Trainer hands its callbacks (`train_dataloader`), as accelerate prepared
it. accelerate's DataLoaderShard (and its other adapters) hold the real DataLoader as
`base_dataloader` and iterate it by calling its __iter__ once an epoch; the adapter's own __iter__
is not DataLoader's (in accelerate before 0.30 the shard subclassed DataLoader and its __iter__ called
DataLoader.__iter__ once, with the shard itself). Either way one call an epoch reaches the wrapped
DataLoader.__iter__, with the shard or its base loader: both are accepted, so each batch is watched
once, with the settings of the loader that loads it. The shard reads one batch ahead: its next()
asks the inner loader for the batch after the one it hands out, and that ask is where the training
blocks, so the wait watched is still the time the training waited for data.

The watch starts at `on_train_begin` and ends at `on_train_end`; the Trainer calls no callback when
training raises, so then the run ends as the process does (its rows kept, the reason given where
Python knows it). An evaluation loader is never watched, even of the same dataset. Under DDP each
rank watches its own loader and rank 0 writes one row per rank; only rank 0 says anything.

With `tune=True` the loader is tuned as `loadtune.tune` tunes a loader (docs/tune.md): the one whose
__iter__ the shard calls (its base DataLoader, with accelerate's batch sampler), its settings tried
within `budget_s` seconds and the best kept for the rest of the training; evaluation is left as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loadtune.training_process.frameworks import CallbackWatch, framework_class, say

if TYPE_CHECKING:
    from transformers import TrainerCallback
else:
    TrainerCallback = framework_class("loadtune.transformers", "Transformers", "transformers",
                                      ("transformers", "TrainerCallback"))


class WatchCallback(CallbackWatch, TrainerCallback):
    """Watches the train DataLoader of each `trainer.train()`: rows named `name` in `out` (default
    results/watch-NAME.csv), written every `every_s` seconds and when the training ends; with
    `tune=True`, tunes it within `budget_s` seconds."""

    WHO = "loadtune.transformers.WatchCallback"

    def on_train_begin(self, args: Any, state: Any, control: Any, train_dataloader: Any = None,
                       **kwargs: Any) -> None:
        if self._watch.watching:  # the Trainer started again (auto_find_batch_size): a new run
            self._watch.stop("the training started again")
        if train_dataloader is None:
            say(f"{self.WHO}: the Trainer gave its callbacks no train_dataloader: nothing watched")
            return
        train = [train_dataloader, getattr(train_dataloader, "base_dataloader", None)]
        train = [loader for loader in train if loader is not None]
        self._watch.start(lambda loader: any(loader is mine for mine in train))

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._watch.stop()
