"""The raw samples beside a sweep's results CSV (NAME.samples.json.gz beside NAME.csv): each
trial's measurements, one per repeat, exactly as measured, so a resumed sweep, `report --verbose`
and the pipeline model derive every figure again from what was measured rather than from the
CSV's rounded figures (as pyperf keeps every raw value in its JSON file).

The file is gzip-compressed JSON: {"format_version", "config_sha", "host", "scale", "ranks",
"trials": [TrialSamples, ...]}. Values are stored generically; every type they hold lives in
loadtune.record.measurement, so reading the file imports neither the process machinery nor torch:

- a dataclass listed in TYPES: {"type": its short name, field: value, ...};
- a tuple or list: a list (read back as a tuple);
- a numpy array: {"ndarray": its dtype's name, "data": [...]}, with "shape" unless it is 1-D;
- a NaN or infinite float: {"float": "nan" | "inf" | "-inf"} (JSON has none);
- None, bool, int, str: as they are (the stored types hold no dicts).

A type listed in FLAT is stored with its nested dataclass fields spelled out in it, in the order
FLAT gives: its stored fields stay as they were when those fields were the type's own.

A type is named by its short name, never by where its class lives: a class may move (its entry in
TYPES moves with it) and older files still read, and a file can only build the classes listed
there. Each class is imported when a file being read first holds one. A field a stored object
has and its class lacks (written by a newer loadtune) is dropped; one the class has and the
object lacks (written by an older one) takes the class's default.

The file is rewritten after every repeat. Each measurement is a gzip member of its own (a file
of several members is one gzip stream to every gzip reader), and SamplesFile keeps the compressed
members between writes: a write compresses only the measurements it has not written before.
"""

from __future__ import annotations

import dataclasses
import gzip
import importlib
import json
import math
import os
import typing
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence, Union

import numpy as np

from loadtune.core.errors import ResultsError
from loadtune.record.measurement import Measurement

SAMPLES_FORMAT_VERSION = 1
COMPRESS_LEVEL = 6
SUFFIX = ".samples.json.gz"

# Short name -> "module:class". The short names are what files hold: never rename one; when a
# class moves, change its path here. A new type that older readers cannot skip needs a new
# SAMPLES_FORMAT_VERSION.
TYPES: dict[str, str] = {
    "TrialSamples": "loadtune.record.samples:TrialSamples",
    "Measurement": "loadtune.record.measurement:Measurement",
    "Window": "loadtune.record.measurement:Window",
    "CpuWindow": "loadtune.record.measurement:CpuWindow",
    "LoaderUse": "loadtune.record.measurement:LoaderUse",
    "SamplerEpoch": "loadtune.record.measurement:SamplerEpoch",
    "ResourceSamples": "loadtune.record.measurement:ResourceSamples",
    "Sample": "loadtune.record.measurement:Sample",
    "ProcessSample": "loadtune.record.measurement:ProcessSample",
}
# Short name -> its stored fields, in order, for a type whose fields group others: each stored
# field is a field of the type ("windows") or of one of its dataclass fields ("start.setup_s"),
# stored under its own name. Stored names stay as they are, whatever the grouping.
FLAT: dict[str, tuple[str, ...]] = {
    "Measurement": ("start.first_batch_s", "windows", "pinned", "batch_bytes", "resources", "start.warmup_s",
                    "start.warmup_batches", "start.setup_s", "ranks", "epochs.sampled", "epochs.dataset_batches",
                    "epochs.window_epoch_batches", "epochs.restarts_workers", "behind"),
}
# Fields added after files were written, stored only where they differ from this default: a
# trial without them is written to the same bytes as before (and reads its default back).
STORED_UNLESS: dict[tuple[str, str], object] = {("Measurement", "behind"): False}
# Array dtypes stored: booleans, integers and floats, whose tolist() JSON writes.
_ARRAY_KINDS = "biuf"
_SPECIAL_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}

Json = Union[None, bool, int, float, str, list["Json"], dict[str, "Json"]]


@dataclass(frozen=True)
class TrialSamples:
    """What a sweep measured of one trial: each repeat's Measurement (each from a process of its
    own) and wall time, and how the trial ended."""

    trial: str
    round: int
    measurements: tuple[Measurement, ...]
    walls_s: tuple[float, ...]
    disturbed: int = 0  # repeats measured again because other processes used the cores
    failure: tuple[str, str, float] | None = None  # status, reason and wall_s of the run that failed
    predicted: tuple[float, float] | None = None  # throughput and wait ratio the model predicted before it ran
    stopped_early: bool = False  # racing stopped it after fewer repeats


@dataclass(frozen=True)
class StoredSamples:
    """A samples file as read: the sweep it belongs to, and each trial's samples by name."""

    format_version: int
    config_sha: str
    host: str
    scale: float
    ranks: int
    trials: Mapping[str, TrialSamples]


def samples_file(csv_path: Path | str) -> Path:
    """Where the samples of the results CSV at `csv_path` go: NAME.samples.json.gz beside NAME.csv."""
    path = Path(csv_path)
    return path.with_name(f"{path.stem}{SUFFIX}")


# --- types -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Kind:
    """A registered dataclass: its short name, how to build one from its stored fields, and
    those fields with where each is read from."""

    name: str
    build: Callable[..., object]
    fields: tuple[str, ...]  # the stored fields, in order
    required: frozenset[str]  # those without a default
    paths: tuple[tuple[str, ...], ...]  # each stored field's attribute, or a field's and its own


def _init_fields(cls: type) -> tuple[dataclasses.Field[object], ...]:
    return tuple(f for f in dataclasses.fields(cls) if f.init)


def _required(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in _init_fields(cls) if f.default is dataclasses.MISSING
                     and f.default_factory is dataclasses.MISSING)


def _kind(name: str, cls: object) -> _Kind:
    if not isinstance(cls, type) or not dataclasses.is_dataclass(cls):
        raise TypeError(f"samples.TYPES[{name!r}] is not a dataclass: {cls!r}")
    fields = tuple(f.name for f in _init_fields(cls))
    if "type" in fields:
        raise TypeError(f"{cls.__qualname__} has a field named 'type', which a stored object uses for its type")
    flat = FLAT.get(name)
    if flat is not None:
        return _flat_kind(name, cls, tuple(tuple(path.split(".")) for path in flat))
    return _Kind(name, cls, fields, _required(cls), tuple((f,) for f in fields))


def _flat_kind(name: str, cls: type, paths: tuple[tuple[str, ...], ...]) -> _Kind:
    """A type stored with its grouped fields spelled out: built by building each group first."""
    hints = typing.get_type_hints(cls)
    groups: dict[str, type] = {path[0]: hints[path[0]] for path in paths if len(path) == 2}
    required = frozenset(path[-1] for path in paths
                         if path[-1] in _required(groups[path[0]] if len(path) == 2 else cls))

    def build(**values: object) -> object:
        own = {path[0]: values[path[0]] for path in paths if len(path) == 1 and path[0] in values}
        grouped: dict[str, dict[str, object]] = {group: {} for group in groups}
        for path in paths:
            if len(path) == 2 and path[1] in values:
                grouped[path[0]][path[1]] = values[path[1]]
        return cls(**own, **{group: groups[group](**kw) for group, kw in grouped.items()})

    return _Kind(name, build, tuple(path[-1] for path in paths), required, paths)


_BY_NAME: dict[str, _Kind] = {}
_BY_CLASS: dict[type, _Kind] = {}
_NAME_BY_PATH = {path: name for name, path in TYPES.items()}


def _kind_named(name: str) -> _Kind:
    """The registered type of a stored object, its class imported on first use."""
    kind = _BY_NAME.get(name)
    if kind is None:
        path = TYPES.get(name)
        if path is None:
            raise _Bad(f"holds a {name!r}, a type this loadtune does not know")
        module, _, attr = path.partition(":")
        kind = _BY_NAME[name] = _kind(name, getattr(importlib.import_module(module), attr))
    return kind


def _kind_of(cls: type) -> _Kind | None:
    kind = _BY_CLASS.get(cls)
    if kind is None:
        name = _NAME_BY_PATH.get(f"{cls.__module__}:{cls.__qualname__}")
        if name is None:
            return None
        kind = _BY_CLASS[cls] = _kind(name, cls)
    return kind


# --- writing ---------------------------------------------------------------------------------


def _plain(value: object) -> object:
    """What json cannot write itself, one level down: a registered dataclass as a dict of its
    fields, an array as its dtype and values, a numpy scalar as the Python one."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in _ARRAY_KINDS:
            raise TypeError(f"cannot store a numpy array of {value.dtype} in a samples file")
        stored: dict[str, object] = {"ndarray": value.dtype.name, "data": value.ravel().tolist()}
        if value.ndim != 1:
            stored["shape"] = list(value.shape)
        return stored
    if isinstance(value, np.generic):
        return value.item()
    return _object(value)


def _object(value: object) -> dict[str, object]:
    """A registered dataclass as its short name and its fields' values (as they are)."""
    kind = _kind_of(type(value))
    if kind is None:
        raise TypeError(f"cannot store a {type(value).__qualname__} in a samples file (not in samples.TYPES)")
    stored: dict[str, object] = {"type": kind.name}
    for name, path in zip(kind.fields, kind.paths):
        got = value
        for attr in path:
            got = getattr(got, attr)
        key = (kind.name, name)
        if key not in STORED_UNLESS or got != STORED_UNLESS[key]:
            stored[name] = got
    return stored


def _spelled(value: object) -> Json:
    """`value` as plain JSON values all the way down, NaN and infinities spelled out."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return {"float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if isinstance(value, (tuple, list)):
        return [_spelled(v) for v in value]
    if isinstance(value, dict):  # only _plain's own
        return {k: _spelled(v) for k, v in value.items()}
    return _spelled(_plain(value))


def _dumps(value: object) -> str:
    """Compact JSON text of `value`. json's encoder does nearly all the work; only a value that
    holds a NaN or an infinity is walked here, to spell them out."""
    try:
        return json.dumps(value, default=_plain, allow_nan=False, separators=(",", ":"))
    except ValueError:  # a NaN or an infinity somewhere
        return json.dumps(_spelled(value), allow_nan=False, separators=(",", ":"))


def _member(text: str) -> bytes:
    """One gzip member holding `text`."""
    packer = zlib.compressobj(COMPRESS_LEVEL, zlib.DEFLATED, 31)  # 31: a gzip header and trailer
    return packer.compress(text.encode("ascii")) + packer.flush()


_COMMA = _member(",")
_CLOSE = _member("]}")


class SamplesFile:
    """A sweep's samples file, valid after every write: each write goes to a temporary file that
    is renamed over it. Keeps each measurement's compressed form between writes, so a write
    after a repeat compresses that repeat's measurement alone."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        # By id(): the Measurement is kept with its member, so its id stays its own.
        self._kept: dict[int, tuple[Measurement, bytes]] = {}

    def write(self, config_sha: str, host: str, scale: float, ranks: int, trials: Sequence[TrialSamples]) -> None:
        """The file holding `trials` (all of them, in order), replacing what it held."""
        names = [t.trial for t in trials]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"trials named twice: {'; '.join(twice)}")
        head = _dumps({"format_version": SAMPLES_FORMAT_VERSION, "config_sha": config_sha, "host": host,
                       "scale": scale, "ranks": ranks})
        parts = [_member(head[:-1] + ',"trials":[')]
        kept: dict[int, tuple[Measurement, bytes]] = {}
        for i, trial in enumerate(trials):
            if i:
                parts.append(_COMMA)
            parts.extend(self._trial(trial, kept))
        parts.append(_CLOSE)
        self._kept = kept
        _replace(self.path, b"".join(parts))

    def _trial(self, trial: TrialSamples, kept: dict[int, tuple[Measurement, bytes]]) -> list[bytes]:
        """A trial's members: its other fields, then each measurement (compressed once), in a list."""
        fields = _object(trial)
        del fields["measurements"]
        parts = [_member(_dumps(fields)[:-1] + ',"measurements":[')]
        for i, measurement in enumerate(trial.measurements):
            before = self._kept.get(id(measurement))
            member = before[1] if before is not None and before[0] is measurement else _member(_dumps(measurement))
            kept[id(measurement)] = (measurement, member)
            if i:
                parts.append(_COMMA)
            parts.append(member)
        parts.append(_CLOSE)
        return parts

    def read(self) -> StoredSamples | None:
        return read_samples(self.path)


def write_samples(path: Path | str, config_sha: str, host: str, scale: float, ranks: int,
                  trials: Sequence[TrialSamples]) -> None:
    """Write a samples file once (a sweep that rewrites it keeps a SamplesFile)."""
    SamplesFile(path).write(config_sha, host, scale, ranks, trials)


def _replace(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# --- reading ---------------------------------------------------------------------------------


class _Bad(ValueError):
    """What is wrong with a stored value (the reader names the file)."""


def _tupled(value: object) -> object:
    if type(value) is not list:
        return value
    if any(type(v) is list for v in value):
        return tuple(_tupled(v) for v in value)
    return tuple(value)


def _decoded(stored: dict[str, object]) -> object:
    """json's object_hook: a stored object as what it stands for (its values already are)."""
    name = stored.get("type")
    if name is not None:
        if not isinstance(name, str):
            raise _Bad(f"holds an object whose type is not a name: {name!r}")
        kind = _kind_named(name)
        values = {field: _tupled(stored[field]) for field in kind.fields if field in stored}
        missing = kind.required.difference(values)
        if missing:
            raise _Bad(f"holds a {name} without its {', '.join(sorted(missing))}")
        try:
            return kind.build(**values)
        except (TypeError, ValueError) as exc:
            raise _Bad(f"holds a {name} that cannot be built: {exc}") from None
    if "ndarray" in stored:
        try:
            dtype = np.dtype(str(stored["ndarray"]))
            if dtype.kind not in _ARRAY_KINDS:
                raise TypeError(f"dtype {dtype}")
            array = np.array(stored["data"], dtype=dtype)
            shape = stored.get("shape")
            return array.reshape(shape) if isinstance(shape, list) else array
        except (KeyError, TypeError, ValueError) as exc:
            raise _Bad(f"holds an array that cannot be read: {exc}") from None
    if "float" in stored:
        special = stored["float"]
        if not isinstance(special, str) or special not in _SPECIAL_FLOATS:
            raise _Bad(f"holds a float spelled {special!r}")
        return _SPECIAL_FLOATS[special]
    return stored


def _version(top: object) -> int | None:
    version = top.get("format_version") if isinstance(top, dict) else None
    return version if isinstance(version, int) and not isinstance(version, bool) else None


def _newer(path: Path, version: int | None) -> None:
    if version is not None and version > SAMPLES_FORMAT_VERSION:
        raise ResultsError(f"{path}: written by a newer loadtune (samples format {version}; this one reads up to "
                           f"{SAMPLES_FORMAT_VERSION}): upgrade loadtune")


def read_samples(path: Path | str) -> StoredSamples | None:
    """The samples file at `path`; None when there is none. A file that cannot be read, is not
    a samples file, is cut short, or was written by a newer format is a ResultsError naming it."""
    path = Path(path)
    if not path.exists():
        return None
    if path.is_dir():
        raise ResultsError(f"{path}: is a folder, not a samples file")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise ResultsError(f"{path}: not a loadtune samples file, or cut short ({exc})") from None
    try:
        top = json.loads(text, object_hook=_decoded)
    except _Bad as exc:
        try:
            _newer(path, _version(json.loads(text)))
        except ValueError:
            pass
        raise ResultsError(f"{path}: {exc}") from None
    except (ValueError, RecursionError) as exc:  # not JSON, or not UTF-8
        raise ResultsError(f"{path}: not a loadtune samples file, or cut short ({exc})") from None
    version = _version(top)
    _newer(path, version)
    if version is None or not isinstance(top, dict):
        raise ResultsError(f"{path}: not a loadtune samples file (no format_version)")
    return _stored(path, version, top)


def _stored(path: Path, version: int, top: dict[str, object]) -> StoredSamples:
    config_sha, host, scale, ranks, trials = (top.get(k) for k in ("config_sha", "host", "scale", "ranks", "trials"))
    if not (isinstance(config_sha, str) and isinstance(host, str) and isinstance(scale, (int, float))
            and isinstance(ranks, int) and isinstance(trials, list)):
        raise ResultsError(f"{path}: not a loadtune samples file (its config_sha, host, scale, ranks or trials "
                           "are missing or of the wrong kind)")
    by_name: dict[str, TrialSamples] = {}
    for trial in trials:
        if not isinstance(trial, TrialSamples):
            raise ResultsError(f"{path}: holds a trial that is not a TrialSamples: {type(trial).__name__}")
        by_name[trial.trial] = trial
    return StoredSamples(version, config_sha, host, float(scale), ranks, by_name)


def repeat_throughputs(samples: TrialSamples, run_epoch_batches: int | None = None) -> list[float]:
    """Each repeat's samples per second from its raw samples, as the training run would see them
    (loadtune.record.run_epochs: epoch starts weighed by `run_epoch_batches`, else the DataLoader's length)."""
    from loadtune.record.run_epochs import run_figures

    if not samples.measurements:
        return []
    first = samples.measurements[0]
    every = dataclasses.replace(first, windows=tuple(w for m in samples.measurements for w in m.windows))
    return [f.throughput for f in run_figures(every, run_epoch_batches)]
