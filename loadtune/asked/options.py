"""What a sweep is asked to do: one frozen object that `loadtune sweep` and `loadtune.sweep()`
both build, validated once (docs/reference.md, "loadtune sweep")."""

from __future__ import annotations

import dataclasses
import json
import math
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence, TypedDict, TypeVar, Union

from loadtune.core.errors import ConfigError
from loadtune.core.kinds import RankBy, Strategy, Word, choices

if TYPE_CHECKING:
    from loadtune.asked.config import RunSpec

# The shorthand options and the config keys they set.
MEASURE_KEYS = {"repeats": "measure.repeats", "batches": "measure.batches", "warmup": "measure.warmup_batches",
                "tolerance": "measure.tolerance", "budget": "measure.budget_s", "device": "device"}
# Config keys whose values may be given as callables from importable modules (Python API).
CALLABLE_KEYS = (("dataset", "factory"), ("step", "factory"), ("loader", "collate_fn"), ("loader", "worker_init_fn"))

# A YAML path, or a mapping of the same keys.
ConfigSource = Union[str, Path, Mapping[str, object]]
# `--set` assignments: "KEY=VALUE" strings, or a mapping of dotted keys to values.
Overrides = Union[Mapping[str, object], Sequence[str], None]

W = TypeVar("W", bound=Word)


class MeasureKeywords(TypedDict, total=False):
    """The shorthands for measure keys (MEASURE_KEYS); None: as the config says."""

    repeats: int | None
    batches: int | None
    warmup: int | None
    tolerance: float | None
    budget: float | None
    device: str | None


class SweepKeywords(MeasureKeywords, total=False):
    """The keywords of loadtune.sweep(): what SweepOptions.of takes that says how to run (None: the default)."""

    scale: float | None
    strategy: Strategy | str | None
    rank_by: RankBy | str | None
    ranks: int | None
    resume: bool | None
    overwrite: bool | None
    seed: int | None


# The keywords of SweepOptions.of that set OutputOptions.
OUTPUT_KEYS = ("out", "resume", "overwrite")
# The keywords of SweepOptions.of that set SweepOptions' own fields.
RUN_KEYS = ("scale", "strategy", "rank_by", "ranks", "seed")


def _member(kind: type[W], value: object, option: str) -> W:
    try:
        return kind(value)
    except ValueError:
        raise ConfigError(f"{option} {value!r}: expected {choices(kind)}") from None


@dataclass(frozen=True)
class MeasureShorthands:
    """The shorthands for measure keys, as MEASURE_KEYS names them; None: as the config says."""

    repeats: int | None = None
    batches: int | None = None
    warmup: int | None = None
    tolerance: float | None = None
    budget: float | None = None
    device: str | None = None

    def assignments(self) -> list[str]:
        """One `--set` assignment per shorthand given."""
        out = []
        for option, key in MEASURE_KEYS.items():
            value = getattr(self, option)
            if value is not None:
                out.append(f"{key}={json.dumps(value)}")
        return out


@dataclass(frozen=True)
class OutputOptions:
    """Where the result goes and what becomes of an existing one: `out` (None: default_output),
    `resume` keeps its rows and measures the rest, `overwrite` replaces it (without either, it is
    refused)."""

    out: Path | None = None
    resume: bool = False
    overwrite: bool = False

    def __post_init__(self) -> None:
        if self.out is not None:
            object.__setattr__(self, "out", Path(self.out))


@dataclass(frozen=True)
class SweepOptions:
    """A sweep as asked: the config (a YAML path, or a mapping of the same keys), `--set`
    assignments, the shorthands for measure keys, how to run, and the output."""

    config: ConfigSource
    sets: tuple[str, ...] = ()
    scale: float = 1.0
    measure: MeasureShorthands = MeasureShorthands()
    strategy: Strategy = Strategy.MODEL
    rank_by: RankBy = RankBy.THROUGHPUT
    ranks: int = 1
    seed: int = 0
    output: OutputOptions = OutputOptions()
    torchrun: bool = False  # run under torchrun, as its rank 0 (ranks is then its world size)

    def __post_init__(self) -> None:
        object.__setattr__(self, "strategy", _member(Strategy, self.strategy, "strategy"))
        object.__setattr__(self, "rank_by", _member(RankBy, self.rank_by, "rank by"))
        object.__setattr__(self, "sets", tuple(self.sets))
        if isinstance(self.ranks, bool) or not isinstance(self.ranks, int) or self.ranks < 1:
            raise ConfigError(f"ranks {self.ranks!r}: expected a whole number, 1 or more")
        if not (isinstance(self.scale, (int, float)) and math.isfinite(self.scale) and self.scale > 0):
            raise ConfigError(f"--scale {self.scale}: must be a number greater than 0")

    @classmethod
    def of(cls, config: ConfigSource, overrides: Overrides = None, **options: Any) -> "SweepOptions":
        """Options from the Python API's keywords (SweepKeywords, and `out`): `overrides` as
        "KEY=VALUE" strings or a mapping of dotted keys to values; an unknown keyword is a
        TypeError, as for any function."""
        unknown = sorted(set(options) - set(MEASURE_KEYS) - set(OUTPUT_KEYS) - set(RUN_KEYS))
        if unknown:
            raise TypeError(f"sweep() got an unexpected option {unknown[0]!r}")
        given = {k: v for k, v in options.items() if v is not None}
        measure = MeasureShorthands(**{k: v for k, v in options.items() if k in MEASURE_KEYS})
        output = OutputOptions(**{k: v for k, v in given.items() if k in OUTPUT_KEYS})
        run = {k: v for k, v in given.items() if k in RUN_KEYS}
        return cls(config=config, sets=tuple(_assignments(overrides)), measure=measure, output=output, **run)

    def assignments(self) -> list[str]:
        """The `--set` assignments, then one per shorthand given."""
        return [*self.sets, *self.measure.assignments()]

    def spec(self) -> RunSpec:
        """The validated config these options ask for."""
        from loadtune.asked.config import config_from_data, load_config

        if isinstance(self.config, Mapping):
            spec = config_from_data(_with_specs(self.config), Path.cwd() / "<config>", self.assignments(), self.scale)
        else:
            spec = load_config(self.config, self.assignments(), self.scale)
        return dataclasses.replace(spec, ranks=self.ranks, torchrun=self.torchrun)

    def out_path(self, spec: RunSpec) -> Path:
        out = self.output.out
        return out if out is not None else default_output(spec)


def default_output(spec: RunSpec) -> Path:
    """docs/reference.md, "loadtune sweep": config `output`, else results/<name>-<host>-x<scale>.csv;
    with N > 1 ranks, -r<N> before the suffix of either."""
    ranks = f"-r{spec.ranks}" if spec.ranks > 1 else ""  # beside the one-rank file, not over it
    if spec.config.output:
        out = Path(spec.config.output)
        out = out if out.is_absolute() else spec.base_dir / out
        return out.with_name(f"{out.stem}{ranks}{out.suffix}") if ranks else out
    host = socket.gethostname().split(".")[0]
    return Path("results") / f"{spec.name}-{host}-x{spec.scale:g}{ranks}.csv"


def _spec_of(value: object, where: str) -> object:
    """A callable given in a config dict, as the "module:callable" spec trial processes import."""
    if isinstance(value, str) or not callable(value):
        return value
    module, name = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if module == "__main__" or module is None or name is None or "<" in name:
        raise ConfigError(f"{where}: {getattr(value, '__name__', value)!r} is defined in the notebook or script "
                          "itself (__main__), which trial processes cannot import: move it into a .py file next "
                          "to the notebook (say data.py) and give \"data.py:NAME\", or import it from there")
    return f"{module}:{name}"


def _with_specs(data: Mapping[str, object]) -> dict[str, object]:
    """The config mapping with callables given for factories and loader functions as specs."""
    out = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in data.items()}
    for section, key in CALLABLE_KEYS:
        part = out.get(section)
        if isinstance(part, dict) and key in part:
            part[key] = _spec_of(part[key], f"{section}.{key}")
    return out


def _assignments(overrides: Overrides) -> list[str]:
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        return [f"{key}={json.dumps(value)}" for key, value in overrides.items()]
    return list(overrides)

