"""Read, override and validate a sweep config (docs/reference.md, "Config reference") into frozen objects.

Everything the user can get wrong in the file is refused here, before anything runs,
with the dotted key path and the offending value in a one-line message.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import operator
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from loadtune.asked.config_yaml import did_you_mean, parse_yaml, read_yaml, yaml_problem
from loadtune.core.errors import ConfigError
from loadtune.core.kinds import MAX_OUTSIDE_CPU, TOLERANCE
from loadtune.core.text import short_repr

DEVICE_PATTERN = re.compile(r"^(auto|cpu|cuda|cuda:\d+)$")
# Loader keys whose values are "module:callable" specs: they can be set, not swept.
SPEC_KEYS = ("collate_fn", "worker_init_fn")
# Loader keys that are thread settings, applied by loadtune, not passed to DataLoader.
THREAD_KEYS = ("main_threads", "worker_threads")
WARMUP_BATCHES_PER_WORKER = 5  # measure.warmup_batches_per_worker's default
WARMUP_PER_WORKER_MAX_S = 0.3  # measure.warmup_per_worker_max_s's default
IDEAL_BATCHES = 10  # the most batches the ideal row's window counts (MeasureSpec.ideal_batches)
# Settings that only mean something with worker processes, and their defaults: dropped when
# num_workers becomes 0.
WORKER_ONLY = {"prefetch_factor": None, "persistent_workers": False, "multiprocessing_context": None,
               "in_order": True, "worker_threads": None}
MAX_VALUE_CHARS = 60


class _Model(BaseModel):
    # allow_inf_nan: a sleep, timeout or step of .inf / .nan is never meant; refuse it here.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class DatasetSpec(_Model):
    factory: str = Field(pattern=r"^.+:[A-Za-z_][\w.]*$")
    kwargs: dict[str, Any] = Field(default_factory=dict)
    scale_kwarg: Optional[str] = None

    @model_validator(mode="after")
    def _scale_kwarg_is_a_kwarg(self) -> "DatasetSpec":
        if self.scale_kwarg is not None and self.scale_kwarg not in self.kwargs:
            raise ValueError(f"scale_kwarg {self.scale_kwarg!r} is not a key of dataset.kwargs")
        return self


SPEC_PATTERN = r"^.+:[A-Za-z_][\w.]*$"


class CallableSpecs(_Model):
    """The block's "module:callable" specs (SPEC_KEYS): DataLoader keywords that are set, not swept."""

    collate_fn: Optional[str] = Field(default=None, pattern=SPEC_PATTERN)
    worker_init_fn: Optional[str] = Field(default=None, pattern=SPEC_PATTERN)


class ThreadSpec(_Model):
    """Not DataLoader keywords: threads of the training process (torch intra-op) and of each
    worker (torch and the OpenMP/BLAS pools); null leaves them as they are."""

    main_threads: Optional[int] = Field(default=None, ge=1)
    worker_threads: Optional[int] = Field(default=None, ge=1)


# LoaderSpec's parts: the block's keys each holds, written flat in the block beside the others.
LOADER_PARTS: dict[str, tuple[type[_Model], tuple[str, ...]]] = {
    "callables": (CallableSpecs, SPEC_KEYS), "threads": (ThreadSpec, THREAD_KEYS)}


class LoaderSpec(_Model):
    """The baseline DataLoader (the `loader:` block): every keyword but `dataset`, with
    DataLoader's defaults, and the thread settings. The specs and the thread settings are held
    in parts (LOADER_PARTS) and written, read (`setting`) and dumped flat, in the block's order."""

    batch_size: Optional[int] = Field(default=1, ge=1)
    shuffle: bool = False
    num_workers: int = Field(default=0, ge=0)
    prefetch_factor: Optional[int] = Field(default=None, ge=1)
    persistent_workers: bool = False
    pin_memory: bool = False
    drop_last: bool = False
    timeout: float = Field(default=0.0, ge=0)
    callables: CallableSpecs = Field(default_factory=CallableSpecs)
    multiprocessing_context: Optional[Literal["fork", "spawn", "forkserver"]] = None
    in_order: bool = True
    threads: ThreadSpec = Field(default_factory=ThreadSpec)

    @model_validator(mode="before")
    @classmethod
    def _parts_from_the_block(cls, data: Any) -> Any:
        """The block's flat keys into the parts that hold them."""
        if not isinstance(data, dict):
            return data
        for part, (_, keys) in LOADER_PARTS.items():
            if part in data:
                raise ValueError(f"{part}: unknown key (its settings are {' and '.join(keys)}, written as they are)")
            given = {k: data[k] for k in keys if k in data}
            if given:
                data = {**{k: v for k, v in data.items() if k not in keys}, part: given}
        return data

    @model_serializer(mode="wrap")
    def _flat(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Dumped as the block is written: each part's keys in its place."""
        out: dict[str, Any] = {}
        for key, value in handler(self).items():
            out.update(value if key in LOADER_PARTS else {key: value})
        return out

    def _part_of(self, key: str) -> BaseModel:
        return next((getattr(self, part) for part, (_, keys) in LOADER_PARTS.items() if key in keys), self)

    def setting(self, key: str) -> Any:
        """A setting by its key in the block (LOADER_KEYS)."""
        return getattr(self._part_of(key), key)

    def explicit(self) -> set[str]:
        """The keys the block (or --set) gave, as the block names them."""
        own = self.model_fields_set - set(LOADER_PARTS)
        return own.union(*(getattr(self, part).model_fields_set for part in LOADER_PARTS))

    def given(self, explicit: set[str]) -> None:
        """Mark `explicit` (keys of the block) as the keys given, in the parts too."""
        own = {k for k in explicit if self._part_of(k) is self}
        own |= {part for part, (_, keys) in LOADER_PARTS.items() if explicit & set(keys)}
        object.__setattr__(self, "__pydantic_fields_set__", own)
        for part, (_, keys) in LOADER_PARTS.items():
            object.__setattr__(getattr(self, part), "__pydantic_fields_set__", explicit & set(keys))

    @model_validator(mode="after")
    def _workers_needed(self) -> "LoaderSpec":
        if self.num_workers == 0:
            if self.prefetch_factor is not None:
                raise ValueError("prefetch_factor needs num_workers > 0: set it to null or raise num_workers")
            if self.persistent_workers:
                raise ValueError("persistent_workers needs num_workers > 0: set it to false or raise num_workers")
        return self


class StepSpec(_Model):
    sleep_s: Optional[float] = Field(default=None, ge=0)
    busy_s: Optional[float] = Field(default=None, ge=0)
    factory: Optional[str] = Field(default=None, pattern=r"^.+:[A-Za-z_][\w.]*$")
    kwargs: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _exactly_one(self) -> "StepSpec":
        given = [k for k in ("sleep_s", "busy_s", "factory") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of sleep_s, busy_s, factory (got {given or 'none'})")
        if self.kwargs and self.factory is None:
            raise ValueError("kwargs is only used with factory")
        return self


class MeasureSpec(_Model):
    warmup_batches: int = Field(default=5, ge=0)
    # Each worker's first batches come slower (its start-up, first touches of memory): the
    # warm-up runs this many more batches per worker, for at most warmup_per_worker_max_s (the
    # slowness is per batch: long batches dilute it), so windows see workers in their stride.
    warmup_batches_per_worker: int = Field(default=WARMUP_BATCHES_PER_WORKER, ge=0)
    warmup_per_worker_max_s: float = Field(default=WARMUP_PER_WORKER_MAX_S, ge=0)
    batches: int = Field(default=50, ge=1)
    epoch_batches: Optional[int] = Field(default=None, ge=1)
    # Batches per epoch in the training run, by which the ranking weighs each epoch's start
    # (null: the DataLoader's own length, at the sweep's scale).
    run_epoch_batches: Optional[int] = Field(default=None, ge=1)
    repeats: int = Field(default=3, ge=1)  # the most repeats any trial gets
    min_repeats: int = Field(default=1, ge=1)  # what every trial gets first
    tolerance: float = Field(default=TOLERANCE, ge=0, lt=1)  # practical-equivalence margin, share of throughput
    budget_s: Optional[float] = Field(default=None, gt=0)  # time budget for the racing repeats
    # Share of the usable cores other processes may use during a window before it is measured again.
    max_outside_cpu: float = Field(default=MAX_OUTSIDE_CPU, ge=0)
    timeout_s: float = Field(default=300.0, gt=0)

    @property
    def ideal_batches(self) -> int:
        """The ideal row's window: the step alone, on one batch kept on the device, varies little
        from batch to batch, so it counts at most IDEAL_BATCHES."""
        return min(self.batches, IDEAL_BATCHES)

    def extra_warmup_for(self, num_workers: int, persistent_workers: bool = True,
                         epoch_length: int | None = None, window_batches: int | None = None) -> int:
        """Warm-up batches beyond warmup_batches for `num_workers` loading processes (at most
        warmup_per_worker_max_s of them). 0 for workers that start again every epoch when an
        epoch (`epoch_length` batches, where known) is no longer than a window (`batches`, or
        `window_batches`): every window then holds a new set of workers' first batches whatever
        the warm-up, as training does."""
        window = self.batches if window_batches is None else window_batches
        if not persistent_workers and epoch_length is not None and epoch_length <= window:
            return 0
        return self.warmup_batches_per_worker * max(int(num_workers or 0), 0)

    @model_validator(mode="after")
    def _repeats_in_order(self) -> "MeasureSpec":
        if self.min_repeats > self.repeats:
            raise ValueError(f"min_repeats ({self.min_repeats}) is more than repeats ({self.repeats}), the most "
                             "any trial gets: raise repeats or lower min_repeats")
        return self


def adopt_loader(loader: LoaderSpec, settings: dict[str, Any] | None, where: str = "loader") -> LoaderSpec:
    """The baseline when the dataset factory built a DataLoader: that loader's settings, with
    the keys the config sets itself (`loader` block, --set) on top."""
    if not settings:
        return loader
    explicit = loader.explicit()
    merged = {k: v for k, v in settings.items() if k in LOADER_KEYS}
    merged.update({k: loader.setting(k) for k in explicit})
    if merged.get("num_workers", 0) == 0:  # settings that need workers go when the config removes them
        merged.update({key: default for key, default in WORKER_ONLY.items() if key not in explicit})
    try:
        adopted = LoaderSpec.model_validate(merged)
    except ValidationError as exc:
        problem = _format_validation(exc, LoaderSpec)
        raise ConfigError(f"{where}: with the settings of the factory's DataLoader: {problem}") from None
    adopted.given(explicit)
    return adopted


# How long to measure, not what: sweeps that differ only in these share their config_sha.
MEASURE_PROCEDURE_KEYS = frozenset({"min_repeats", "tolerance", "budget_s", "max_outside_cpu"})


# The keys of the `loader:` block, in its order (the thread settings last).
LOADER_KEYS = tuple(LoaderSpec().model_dump())
SWEEPABLE = tuple(k for k in LOADER_KEYS if k not in SPEC_KEYS)


def _check_sweep(sweep: dict[str, list[Any]]) -> None:
    """Each swept value must be valid for its key on its own; combinations are the plan's job."""
    for key, values in sweep.items():
        if key not in SWEEPABLE:
            hint = "a spec can be set in loader, not swept" if key in SPEC_KEYS else "not a DataLoader setting"
            near = "" if key in SPEC_KEYS else did_you_mean(key, SWEEPABLE)
            raise ValueError(f"sweep.{_key(key)}: unknown key{near} ({hint}; sweepable: {', '.join(SWEEPABLE)})")
        if not values:
            raise ValueError(f"sweep.{key}: give at least one value to try")
        part = next((model for model, keys in LOADER_PARTS.values() if key in keys), LoaderSpec)
        field = part.model_fields[key]
        annotated: Any = operator.getitem(Annotated, (field.annotation, *field.metadata)) if field.metadata \
            else field.annotation
        adapter: TypeAdapter[Any] = TypeAdapter(annotated, config=ConfigDict(strict=True, allow_inf_nan=False))
        for i, value in enumerate(values):
            try:
                adapter.validate_python(value)
            except ValidationError as exc:
                msg = exc.errors()[0]["msg"]
                raise ValueError(f"sweep.{key}[{i}] = {_short(value)}: {msg}") from None


class Config(_Model):
    name: Optional[str] = Field(default=None, pattern=r"^[\w.\-]+$")
    dataset: DatasetSpec
    loader: LoaderSpec = Field(default_factory=LoaderSpec)
    sweep: dict[str, list[Any]] = Field(default_factory=dict)
    step: StepSpec
    measure: MeasureSpec = Field(default_factory=MeasureSpec)
    device: str = Field(default="auto", pattern=DEVICE_PATTERN.pattern)
    output: Optional[str] = None

    @field_validator("output")
    @classmethod
    def _a_file_path(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and (not value.strip() or "\x00" in value):
            raise ValueError("give a CSV file path (not empty, no NUL byte), or null")
        return value

    @model_validator(mode="after")
    def _sweep_values(self) -> "Config":
        _check_sweep(self.sweep)
        return self




@dataclass(frozen=True)
class RunSpec:
    """A validated config together with where it came from and the scale it runs at."""

    config: Config
    path: Path
    scale: float = 1.0
    sha: str = ""  # of the config as written and overridden, before scaling; see config_sha()
    ranks: int = 1  # data-parallel ranks each trial runs on at once (--ranks, or torchrun's world size)
    torchrun: bool = False  # this sweep runs under torchrun, as its rank 0
    source: str = "dataset"  # what the dataset factory returned: a dataset, a DataLoader, a data module
    samples_sha: str = ""  # the sha without measure.repeats: raw samples kept by --resume match it

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    @property
    def name(self) -> str:
        return self.config.name or self.path.stem



def config_sha(config: Config, *, repeats: bool = True) -> str:
    """Hash of a config without its output path and how long it is measured for
    (MEASURE_PROCEDURE_KEYS). Taken before --scale, so sweeps of one config at several scales
    (or on several machines) share it and can be compared. Without `repeats`, measure.repeats
    is left out too: what --resume matches raw samples by, so kept trials can get more repeats."""
    procedure = set(MEASURE_PROCEDURE_KEYS) if repeats else {*MEASURE_PROCEDURE_KEYS, "repeats"}
    exclude: dict[str, Any] = {"output": True, "measure": procedure}
    # Keys added since the first results format change no hash while left at their default.
    exclude["loader"] = {"threads": {k for k in THREAD_KEYS if config.loader.setting(k) is None}}
    at_default = {"warmup_batches_per_worker": WARMUP_BATCHES_PER_WORKER,
                  "warmup_per_worker_max_s": WARMUP_PER_WORKER_MAX_S, "run_epoch_batches": None}
    exclude["measure"] = exclude["measure"] | {k for k, v in at_default.items() if getattr(config.measure, k) == v}
    try:
        data = config.model_dump(mode="json", exclude=exclude)
        blob = json.dumps(data, sort_keys=True, default=str).encode()
    except (ValueError, TypeError):  # kwargs JSON cannot hold (e.g. YAML !!binary that is not UTF-8)
        data = config.model_dump(mode="python", exclude=exclude)
        blob = json.dumps(data, sort_keys=True, default=repr).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def _short(value: Any) -> str:
    return short_repr(value, MAX_VALUE_CHARS)


_PLAIN_KEY = re.compile(r"^[\w.\-]+$")


def _key(part: Any) -> str:
    """A key as the user wrote it when it is plain; quoted when it holds spaces, newlines or
    other odd characters, so that a message stays one readable line."""
    text = str(part)
    return text if _PLAIN_KEY.match(text) else repr(part)


def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    # A part's key is named as the block writes it: loader.main_threads, not loader.threads.main_threads.
    loc = tuple(p for i, p in enumerate(loc)
                if not (p in LOADER_PARTS and i + 1 < len(loc) and loc[i + 1] in LOADER_PARTS[p][1]))
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{_key(part)}" if out else _key(part))
    return out


def _block_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> tuple[str, ...]:
    """The keys of the block at `loc` under `model` (the loader block's as it writes them)."""
    for part in loc:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        inner = field.annotation if field is not None else None
        if not (isinstance(inner, type) and issubclass(inner, BaseModel)):
            return ()
        model = inner
    return LOADER_KEYS if model is LoaderSpec else tuple(model.model_fields)


def _format_validation(err: ValidationError, model: type[BaseModel] = Config) -> str:
    parts = []
    for e in err.errors():
        path = _dotted(e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if not path:
            parts.append(msg)
        elif e["type"] == "extra_forbidden":
            parts.append(f"{path}: unknown key{did_you_mean(e['loc'][-1], _block_keys(model, e['loc'][:-1]))}")
        elif e["type"] == "missing":
            parts.append(f"{path}: required key is missing")
        elif isinstance(e.get("input"), dict):
            parts.append(f"{path}: {msg}")
        else:
            parts.append(f"{path} = {_short(e.get('input'))}: {msg}")
    return "; ".join(parts)


def _refuse_cycles(data: Any, where: str) -> None:
    """A YAML alias inside its own anchor (`a: &x [*x]`) makes a structure that contains
    itself: nothing can validate, hash or pass it on. Iterative, linear in the nodes."""
    done: set[int] = set()
    on_path: set[int] = set()
    stack: list[tuple[Any, tuple[Any, ...], bool]] = [(data, (), False)]
    while stack:
        node, loc, leaving = stack.pop()
        if leaving:
            on_path.discard(id(node))
            done.add(id(node))
            continue
        if not isinstance(node, (dict, list)) or id(node) in done:
            continue
        if id(node) in on_path:
            raise ConfigError(f"{where}: {_dotted(loc) or 'the document'}: refers to itself "
                              "(a YAML alias used inside its own anchor)")
        on_path.add(id(node))
        stack.append((node, loc, True))
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in items:
            stack.append((child, (*loc, key), False))


def apply_override(data: dict[str, Any], assignment: str) -> dict[str, Any]:
    """Return a copy of `data` with one `KEY.PATH=VALUE` override applied (VALUE parsed as YAML)."""
    key, sep, raw = assignment.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set expects KEY=VALUE, got {_short(assignment)}")
    parts = key.split(".")
    if not all(parts):
        raise ConfigError(f"--set {_key(key)}: a key path is names joined by dots, like loader.batch_size")
    try:
        value = parse_yaml(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {_key(key)}: value {_short(raw)} is not valid YAML: {yaml_problem(exc)}") from None
    _refuse_cycles(value, f"--set {_key(key)}")
    out = copy.deepcopy(data)
    node = out
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"--set {_key(key)}: {_key('.'.join(parts[: i + 1]))} is not a mapping")
        node = child
    node[parts[-1]] = value
    return out


def load_config(
    path: str | Path,
    overrides: list[str] | tuple[str, ...] = (),
    scale: float = 1.0,
) -> RunSpec:
    """Load `path`, apply `--set` overrides and `--scale`, validate, and return a RunSpec."""
    path = Path(path)
    data = read_yaml(path)
    return config_from_data(data, path, overrides, scale)


def config_from_data(data: dict[str, Any], path: Path, overrides: list[str] | tuple[str, ...] = (),
                     scale: float = 1.0) -> RunSpec:
    """A config given as data (a mapping, as YAML would load it): `path` names it in messages,
    and relative factory paths and `output` are taken from its folder."""
    _refuse_cycles(data, str(path))
    for assignment in overrides:
        data = apply_override(data, assignment)
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {_format_validation(exc)}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply") from None
    sha, samples_sha = config_sha(config), config_sha(config, repeats=False)
    if scale != 1.0:
        config = _scaled(config, path, scale)
    return RunSpec(config=config, path=path.resolve(), scale=scale, sha=sha, samples_sha=samples_sha)


def _scaled(config: Config, path: Path, scale: float) -> Config:
    if not (scale > 0 and math.isfinite(scale)):
        raise ConfigError(f"--scale {scale}: must be a number greater than 0")
    kwarg = config.dataset.scale_kwarg
    if kwarg is None:
        raise ConfigError(f"{path}: --scale needs dataset.scale_kwarg (the dataset kwarg to multiply)")
    value = config.dataset.kwargs[kwarg]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{path}: dataset.kwargs.{kwarg} = {_short(value)}: --scale needs a number")
    scaled = value * scale
    if not math.isfinite(scaled):
        raise ConfigError(f"{path}: dataset.kwargs.{kwarg} = {_short(value)} times --scale {scale:g} is not a "
                          "finite number")
    kwargs = {**config.dataset.kwargs, kwarg: max(1, round(scaled))}
    dataset = config.dataset.model_copy(update={"kwargs": kwargs})
    return config.model_copy(update={"dataset": dataset})
