"""Every DataLoader a training script iterates, watched (`loadtune watch SCRIPT`, the framework
callbacks): DataLoader.__iter__ wrapped for as long as a run is watched, the script's code unchanged."""

from __future__ import annotations

import weakref
from typing import Any, Callable, Iterator

from loadtune.training_process.run import RunWatch

_original: Callable[[Any], Iterator[Any]] | None = None
_run: RunWatch | None = None
_select: Callable[[Any], bool] | None = None
_tuner: Callable[[Any], Any] | None = None  # `loadtune watch --tune`: a loader -> what iterates it tuned
_tuned: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


_owned: "weakref.WeakSet[Any]" = weakref.WeakSet()  # loaders loadtune.watch's wrapper watches itself


def plain_iter(loader: Any) -> Iterator[Any]:
    """The loader's own iterator (a subclass's own __iter__ included), never watched twice: a
    loader loadtune.watch wraps is left alone by the wrapped DataLoader.__iter__."""
    own(loader)
    return iter(loader)


def own(loader: Any) -> None:
    """`loader` is iterated as it is, never watched (or tuned) by the wrapped DataLoader.__iter__:
    a loader loadtune.watch wraps, or a tuned run's loader of one setting, which its own watch times."""
    try:
        _owned.add(loader)
    except TypeError:  # no weak reference to it: not a DataLoader, which the hook never sees
        pass


Hooked = tuple[RunWatch, Callable[[Any], bool] | None, Callable[[Any], Any] | None]


def current() -> Hooked | None:
    """The run every DataLoader goes to now, its `select` and its `tune`; None when none is watched."""
    return (_run, _select, _tuner) if _original is not None and _run is not None else None


def watch_every_loader(run: RunWatch, select: Callable[[Any], bool] | None = None,
                       tune: Callable[[Any], Any] | None = None) -> None:
    """From now on every DataLoader iterated (that `select` accepts) is watched by `run`; with
    `tune` (a loader -> an iterable over it, tuned: training_process.tune.tuned_for), tuned."""
    global _original, _run, _select, _tuner
    from torch.utils.data import DataLoader

    if _original is None:
        _original = DataLoader.__iter__
        DataLoader.__iter__ = _watched_iter  # type: ignore[method-assign, assignment]
    _run, _select, _tuner = run, select, tune


def stop_watching() -> None:
    """DataLoader.__iter__ as it was; the loaders the run tuned let go of their workers."""
    global _original, _run, _select, _tuner
    for loader, tuned in list(_tuned.items()):
        if tuned.run is _run:
            tuned.release()
            del _tuned[loader]
    if _original is not None:
        from torch.utils.data import DataLoader

        DataLoader.__iter__ = _original  # type: ignore[method-assign, assignment]
    _original, _run, _select, _tuner = None, None, None, None


def _watched_iter(self: Any) -> Iterator[Any]:
    original, run = _original, _run
    assert original is not None
    if run is None or run.closed or self in _owned or (_select is not None and not _select(self)):
        return original(self)
    if _tuner is not None:
        tuned = _tuned.get(self)
        if tuned is None or tuned.run is not run:  # a later run over the same loader tunes it anew
            tuned = _tuned[self] = _tuner(self)
        return iter(tuned)
    return run.watch(self).iterate(lambda: original(self))


