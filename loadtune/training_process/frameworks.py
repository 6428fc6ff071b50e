"""What the framework callbacks (loadtune.lightning, loadtune.transformers) share: a watched run of
the trainer's train DataLoader(s), started and ended by the framework's hooks.

The train loaders are found the way `loadtune watch SCRIPT` finds every loader: DataLoader.__iter__
wrapped (hook.watch_every_loader), here with a `select` that accepts only the loaders the trainer
trains from (`accepts`, asked at each epoch's iter()), so validation and prediction loaders, and
any other loader the process iterates, pass through unwatched. Each epoch's iter() of a DataLoader
goes through the wrapped __iter__ once, whatever wraps the loader (a trainer's adapter that calls
the inner loader's __iter__ is not itself a DataLoader subclass, and one that is calls the base
__iter__ once), so each batch is watched exactly once.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, Iterator

from loadtune.core.errors import ConfigError
from loadtune.record.record import Record
from loadtune.training_process import hook
from loadtune.training_process.probe import batches_of
from loadtune.training_process.run import RunWatch, checked_seconds, default_out, run_for
from loadtune.training_process.tune import DEFAULT_BUDGET_S, Tuned, tuned_for


def flat_loaders(iterables: Any) -> Iterator[Any]:
    """The loaders in a trainer's collection of them (one, or nested lists, tuples and mappings;
    a combined loader's `flattened` list), each once."""
    stack, seen = [iterables], set()
    while stack:
        item = stack.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, Mapping):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        elif isinstance(getattr(item, "flattened", None), list):  # Lightning's CombinedLoader
            stack.extend(reversed(item.flattened))
        else:
            yield item


class FrameworkWatch:
    """One training run's watch: `start(accepts)` when the trainer is about to iterate its train
    loaders, `stop(reason)` when it is done (or failed). The rows are named `name` (a second train
    loader `name 2`, ...; with ranks `name rank R`) and go to `out` (default: default_out(name)).
    With `tune`, each train loader is tuned within `budget_s` seconds (docs/tune.md): a `tuned` row
    `name: SETTING` per setting tried, the `watched` row `name` of the one kept."""

    def __init__(self, *, out: str | os.PathLike[str] | None, every_s: float, name: str, who: str,
                 tune: bool = False, budget_s: float = DEFAULT_BUDGET_S) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"{who}: name must be a non-empty text, got {name!r}")
        if not isinstance(tune, bool):
            raise ConfigError(f"{who}: tune must be True or False, got {tune!r}")
        self.out = Path(out) if out is not None else default_out(name)
        self.every_s = checked_seconds(every_s, "every_s", who)
        self.name = name
        self.tune, self.budget_s = tune, checked_seconds(budget_s, "budget_s", who)
        self._tunings = 0  # the train loaders tuned in this run so far
        self.run: RunWatch | None = None
        self._accepts: Callable[[Any], bool] | None = None
        self._outer: hook.Hooked | None = None

    @property
    def watching(self) -> bool:
        return self.run is not None and not self.run.closed

    def start(self, accepts: Callable[[Any], bool]) -> RunWatch:
        """Watch, from now on, every DataLoader iterated that `accepts` (its trainer's train loaders)."""
        if self.watching:
            assert self.run is not None
            self._accepts = accepts
            return self.run
        script = sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c") else None
        self.run = run_for(self.out, self.every_s, self.name, script=script)
        self._accepts, self._tunings = accepts, 0
        # `loadtune watch SCRIPT` already wraps DataLoader.__iter__ for its own run: the trainer's
        # loaders come to this run while it trains, every other loader to that one again after.
        outer = hook.current()
        if outer is not None and outer[0] is not self.run:
            self._outer = outer
        hook.watch_every_loader(self.run, self._select, self._tuned if self.tune else None)
        atexit.register(self._at_exit)  # runs before the run's own (atexit is last in, first out)
        return self.run

    def _select(self, loader: Any) -> bool:
        run, accepts = self.run, self._accepts
        if run is None or run.closed or accepts is None:
            return False
        try:
            if not accepts(loader):
                return False
        except Exception:  # noqa: BLE001 - a trainer in a state not foreseen here: unwatched
            return False
        if not self.tune:  # a tuned loader's watches are its settings' own (_tuned)
            watch = run.watch(loader, self.name)  # named here; the hook then finds this watch for the loader
            batches_of(watch.facts.settings, loader)
        return True

    def _tuned(self, loader: Any) -> Tuned:
        """A train loader `_select` accepted, tuned into the run (the hook asks once a loader, and
        iterates what this returns at each epoch): named `name`, a second one `name 2`, ..."""
        run = self.run
        assert run is not None
        self._tunings += 1
        name = self.name if self._tunings == 1 else f"{self.name} {self._tunings}"
        return tuned_for(loader, run, name, self.budget_s)

    def stop(self, reason: str = "") -> list[Record]:
        """The run is over: the hook undone (the outer one, if any, back), the file written."""
        atexit.unregister(self._at_exit)
        run, self.run, self._accepts = self.run, None, None
        now = hook.current()
        if run is not None and now is not None and now[0] is run:
            hook.stop_watching()
            outer, self._outer = self._outer, None
            if outer is not None and not outer[0].closed:
                hook.watch_every_loader(*outer)
        if run is None:
            return []
        return run.close(reason)

    def _at_exit(self) -> None:
        """The process ends with the run still open (the training raised where no hook of the
        framework is called): the reason, when Python knows it."""
        kind = getattr(sys, "last_type", None)
        self.stop(failed(kind) if isinstance(kind, type) else "")


class CallbackWatch:
    """What both framework callbacks are besides their hooks: their keywords, a FrameworkWatch of
    them (made anew for a copy sent to another process) and its run. Mixed in before the
    framework's callback class, whose __init__ it calls."""

    WHO = ""  # the callback's name, for messages

    def __init__(self, *, out: str | os.PathLike[str] | None = None, every_s: float = 60.0,
                 name: str = "train", tune: bool = False, budget_s: float = DEFAULT_BUDGET_S) -> None:
        super().__init__()
        self.out, self.every_s, self.name = out, every_s, name
        self.tune, self.budget_s = tune, budget_s
        self._watch = self._new_watch()

    def _new_watch(self) -> FrameworkWatch:
        return FrameworkWatch(out=self.out, every_s=self.every_s, name=self.name, who=self.WHO, tune=self.tune,
                              budget_s=self.budget_s)

    @property
    def run(self) -> RunWatch | None:
        """The run being watched, None between trainings."""
        return self._watch.run


def failed(kind: type[BaseException]) -> str:
    """The reason a row gives for a training that raised `kind`."""
    if issubclass(kind, KeyboardInterrupt):
        return "interrupted"
    return f"the training raised {kind.__name__}"


def framework_class(who: str, needs: str, extra: str, *places: tuple[str, str]) -> Any:
    """The first of `places` (module, class name) that imports: the framework's class a callback
    subclasses. None importable: an ImportError saying which extra installs it."""
    import importlib

    missing: ImportError | None = None
    for module, name in places:
        try:
            return getattr(importlib.import_module(module), name)
        except ImportError as exc:
            missing = exc
    raise ImportError(f"{who} needs {needs}: pip install 'loadtune-torch[{extra}]'") from missing


def say(line: str) -> None:
    """A line of the callback's own (rank 0 only), where the run's lines go."""
    from loadtune.training_process.run import _group, logger

    if _group().rank == 0:
        logger().log(logging.WARNING, line)
