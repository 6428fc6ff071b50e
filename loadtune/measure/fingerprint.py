"""What a batch holds, cheaply: one 64-bit key per sample, from a small fixed slice of its bytes,
and the sample's integer label or index where the batch carries one. In the measured loop only
the slices are copied out per batch; they are hashed once the window is over.

The sweep compares these keys across trials and ranks (loadtune.measure.datacheck) to tell
whether a faster config still feeds the same samples of an IterableDataset (a map-style dataset's
are the indices its sampler hands out: loadtune.trial_process.sampled). A key hashes
SLICE_ELEMENTS elements spread evenly over each sample of the batch's first tensor (never the
whole batch), with the label mixed in, using numpy integer arithmetic: the same bytes give the
same key in every process (Python's salted hash() would not).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

# Elements read from each sample: spread evenly over it (stride n // SLICE_ELEMENTS).
SLICE_ELEMENTS = 32
_WORD_BYTES = 8
# Odd 64-bit multipliers, one per word of a slice and one for the label: a key is the sum of
# each word times its multiplier (wrapping), the label's likewise; enough to tell samples apart.
_WORD_MULTIPLIERS = (np.random.default_rng(0x10AD).integers(0, 2**63, size=64, dtype=np.uint64) * np.uint64(2)
                     + np.uint64(1))
_LABEL_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)
_MAX_WIDTH = len(_WORD_MULTIPLIERS) * _WORD_BYTES  # bytes of a slice hashed at most


def _is_array(item: Any) -> bool:
    shape = getattr(item, "shape", None)
    return shape is not None and len(shape) > 0 and hasattr(item, "dtype")


def _leaves(batch: Any) -> Iterator[Any]:
    """Tensors and arrays of a batch in the order batch_len looks at them (breadth first)."""
    queue = [batch]
    while queue:
        item = queue.pop(0)
        if _is_array(item):
            yield item
        elif isinstance(item, Mapping):
            queue.extend(item.values())
        elif isinstance(item, (list, tuple)):
            queue.extend(item)


def _is_integer(item: Any) -> bool:
    dtype = item.dtype
    if isinstance(dtype, np.dtype):
        return dtype.kind in "iu"
    return not (item.is_floating_point() or item.is_complex()) and str(dtype) != "torch.bool"


@functools.lru_cache(maxsize=64)
def _picks(sample_shape: tuple[int, ...]) -> tuple[int, tuple[np.ndarray, ...]]:
    """Where the SLICE_ELEMENTS elements of a sample lie: the stride over the flattened sample,
    and the same positions as an index per dimension (for samples not laid out contiguously)."""
    per_sample = math.prod(sample_shape)
    stride = max(per_sample // SLICE_ELEMENTS, 1)
    flat = np.arange(0, per_sample, stride)[:SLICE_ELEMENTS]
    return stride, np.unravel_index(flat, sample_shape)


def _as_numpy(item: Any) -> np.ndarray | None:
    """A CPU tensor as a numpy array sharing its memory (types numpy lacks, like bfloat16, as
    same-width integers); a device tensor is sliced first, then copied."""
    if isinstance(item, np.ndarray):
        return item if item.dtype.kind in "biufc" else None
    import torch

    if item.device.type != "cpu":
        stride, _ = _picks(tuple(item.shape[1:]))
        item = item.reshape(item.shape[0], -1)[:, ::stride][:, :SLICE_ELEMENTS].cpu()
    if item.requires_grad:
        item = item.detach()
    try:
        array: np.ndarray = item.numpy()
    except TypeError:  # a dtype numpy does not have
        width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(item.element_size())
        return item.view(width).numpy() if width is not None else None
    return array


def _slice_bytes(item: Any, size: int) -> np.ndarray | None:
    """SLICE_ELEMENTS elements spread evenly over each sample of `item` (in logical order,
    whatever the memory layout), as bytes: (size, width) uint8."""
    array = _as_numpy(item)
    if array is None or array.size == 0:
        return None
    if array.ndim == 1:
        rows = array[:, None]
    elif array.flags.c_contiguous:
        stride, _ = _picks(array.shape[1:])
        rows = array.reshape(size, -1)[:, ::stride][:, :SLICE_ELEMENTS]
    else:
        rows = array[(slice(None),) + _picks(array.shape[1:])[1]]
    return np.ascontiguousarray(rows).view(np.uint8)[:, :_MAX_WIDTH]


def _hash_rows(rows: np.ndarray) -> np.ndarray:
    """A 64-bit key for each row of a (n, width) uint8 array: its 8-byte words times their
    multipliers, summed (wrapping)."""
    n, width = rows.shape
    pad = -width % _WORD_BYTES
    if pad:
        rows = np.concatenate([rows, np.zeros((n, pad), np.uint8)], axis=1)
    words = rows.view(np.uint64)
    keys: np.ndarray = words.dot(_WORD_MULTIPLIERS[:words.shape[1]]) + np.uint64(width)
    return keys


def sample_slice(batch: Any, size: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """What the keys of a batch of `size` samples are made of, copied out of the batch: the
    bytes of SLICE_ELEMENTS elements of each sample of its first tensor or array whose first
    dimension is `size` ((size, width) uint8), and its labels (int64: the first 1-D integer
    tensor of length `size`). Either is None when the batch has no such tensor; both when
    anything about the batch defeats this (a key is never worth failing a trial for)."""
    try:
        return _sample_slice(batch, size)
    except Exception:  # noqa: BLE001 - an exotic batch: no keys, the data check says so
        return None, None


def _sample_slice(batch: Any, size: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    content = label = None
    for item in _leaves(batch):
        if item.shape[0] != size:
            continue
        if content is None:
            content = item
        if item.ndim == 1 and _is_integer(item):
            label = item
            break
    if content is None or size <= 0:
        return None, None
    labels = None
    if label is not None:
        labels = np.array(label if isinstance(label, np.ndarray) else label.cpu().numpy(), dtype=np.int64)
    rows = _slice_bytes(content, size)
    return (None if rows is None else np.array(rows, order="C")), labels


def keys_of(rows: np.ndarray, labels: np.ndarray | None) -> np.ndarray:
    """Each sample's key (uint64) from its slice's bytes, with its label mixed in where there is one."""
    keys = _hash_rows(rows)
    if labels is not None:
        keys = keys + labels.view(np.uint64) * _LABEL_MULTIPLIER
    return keys


def sample_keys(batch: Any, size: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Per sample of a batch: its key (uint64) and its label (int64); either None when the
    batch has no tensor to take it from (see sample_slice)."""
    rows, labels = sample_slice(batch, size)
    return (None if rows is None else keys_of(rows, labels)), labels


Taken = tuple[np.ndarray | None, np.ndarray | None]  # a batch's sample_slice


def window_keys(taken: Sequence[Taken]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A window's keys and labels, one per counted sample in order, from each batch's slices:
    hashed once the window is over, all batches together where their slices are alike. Empty
    when a batch had none."""
    rows = [r for r, _ in taken if r is not None]
    labels = [lab for _, lab in taken if lab is not None]
    has_labels = bool(labels) and len(labels) == len(taken)
    all_labels = np.concatenate(labels) if has_labels else None
    if not rows or len(rows) < len(taken):
        keys: tuple[int, ...] = ()
    elif len({r.shape[1] for r in rows}) == 1:
        keys = tuple(keys_of(np.concatenate(rows), all_labels).tolist())
    else:
        keys = tuple(k for r, (_, lab) in zip(rows, taken) for k in keys_of(r, lab if has_labels else None).tolist())
    return keys, tuple(all_labels.tolist()) if all_labels is not None else ()
