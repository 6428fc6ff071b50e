"""Errors raised while loading a sample or collating a batch name the dataset index at which
they happened: torch's map-style fetch, the same steps, with a note added to the error."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from loadtune.trial.failures import NOTE_PREFIX


def init_worker(user_init: Callable[[int], Any] | None, worker_id: int) -> None:
    """A worker's first call: notes installed in this process (spawned and forkserver workers
    do not inherit them), then the user's own worker_init_fn."""
    install_fetch_notes()
    if user_init is not None:
        user_init(worker_id)


def _indices_text(indices: Sequence[Any]) -> str:
    items = list(indices)
    if len(items) <= 4:
        return f"[{', '.join(map(str, items))}]"
    return f"[{items[0]}, {items[1]}, ..., {items[-1]}] ({len(items)} indices)"


def _note(exc: BaseException, text: str) -> None:
    note = NOTE_PREFIX + text
    if hasattr(exc, "add_note"):  # Python 3.11+: the note is printed with the traceback
        exc.add_note(note)
    else:
        exc.__notes__ = [*getattr(exc, "__notes__", []), note]


def _annotated_fetch(self: Any, possibly_batched_index: Any) -> Any:
    """torch's _MapDatasetFetcher.fetch, the same steps, with the failing index noted on the
    error. A `try` costs nothing until it raises; the loop runs as many calls as before."""
    dataset = self.dataset
    if self.auto_collation:
        if hasattr(dataset, "__getitems__") and dataset.__getitems__:
            try:
                data = dataset.__getitems__(possibly_batched_index)
            except Exception as exc:
                _note(exc, f"at dataset indices {_indices_text(possibly_batched_index)} (__getitems__)")
                raise
        else:
            data = []
            for idx in possibly_batched_index:
                try:
                    data.append(dataset[idx])
                except Exception as exc:
                    _note(exc, f"at dataset index {idx}")
                    raise
    else:
        try:
            data = dataset[possibly_batched_index]
        except Exception as exc:
            _note(exc, f"at dataset index {possibly_batched_index}")
            raise
    try:
        return self.collate_fn(data)
    except Exception as exc:
        what = _indices_text(possibly_batched_index) if self.auto_collation else possibly_batched_index
        _note(exc, f"in collate_fn, batch of dataset indices {what}")
        raise


def install_fetch_notes() -> None:
    """Make map-style fetches in this process name the index at which the dataset failed."""
    try:
        from torch.utils.data._utils import fetch
    except ImportError:  # a torch without this private module: errors just lack the index
        return
    fetcher = getattr(fetch, "_MapDatasetFetcher", None)
    if fetcher is not None and fetcher.fetch is not _annotated_fetch:
        fetcher.fetch = _annotated_fetch
