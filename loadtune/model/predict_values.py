"""The values of `loadtune predict` and of the checks of a model against other files: the
target asked about, the machine measured, each config predicted there, the forecast with its
recommendation, and what a model or a sweep said of another file's machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loadtune.model.fitted import PipelineModel
from loadtune.record.findings import ModelError
from loadtune.record.settings import SETTING_COLUMNS


@dataclass(frozen=True)
class Travel:
    """The pick for one common target, when it differs from the sweep's (predict.travel)."""

    label: str
    config: str
    share: float  # what the sweep's pick would run there, as a share of this config's prediction


@dataclass(frozen=True)
class Target:
    """The machine to predict for; None takes the source's figure (step: as measured)."""

    cores: float | None = None  # usable cores of the machine, shared by all ranks
    ranks: int = 1  # ranks on it, each with its own DataLoader
    step_ms: float | None = None  # the training step per batch (of the source's batch size)
    scale: float | None = None  # data scale, for memory (the source's, when None)
    ram_gb: float | None = None
    shm_gb: float | None = None


@dataclass(frozen=True)
class ResolvedTarget:
    """A Target with the source's figures where it gave none (resolve)."""

    cores: float
    ranks: int
    step_ms: float
    scale: float
    ram_gb: float | None = None
    shm_gb: float | None = None


@dataclass(frozen=True)
class Source:
    """What the rows were measured on."""

    cores: float  # usable cores of the machine (affinity and quota), all ranks together
    ranks: int
    batch_size: int  # the most common batch size: the one a step time refers to
    step_ms: float  # the model's uncontended step at that batch size
    step_ms_range: tuple[float, float]  # the step times measured, per batch of that size
    scale: float
    ram_gb: float | None
    shm_gb: float | None
    # the settings of the sweep's recommendation, when the file has one; of a run, the watched loader's own
    pick: dict[str, Any] | None
    run: str | None = None  # the watched loader, when the rows are a real training run's


@dataclass(frozen=True)
class Memory:
    """A config's memory on the target, after a full epoch at its data scale (per machine)."""

    ram_gb: float | None  # every rank's training process and workers
    shm_gb: float  # batches in flight in /dev/shm
    fits: bool
    why: str | None = None  # what does not fit


@dataclass(frozen=True)
class TargetRow:
    """One config of the space, predicted for the target."""

    config: str  # its settings, as DataLoader keywords
    settings: dict[str, Any]
    predicted_throughput: float  # samples/s, all ranks
    predicted_throughput_per_rank: float
    predicted_wait_ratio: float
    cpu_bound: bool
    measured_throughput: float | None  # on the source, where it was measured there
    memory: Memory
    recommended: bool = False

    @property
    def measured(self) -> bool:
        """Whether the source measured this config on this very machine (the target is the source's)."""
        return self.measured_throughput is not None

    @property
    def figure(self) -> float:
        """What the recommendation goes by: what the source measured of it on this very machine,
        where it did (no prediction overrules a measurement of the same machine); else predicted."""
        return self.measured_throughput if self.measured_throughput is not None else self.predicted_throughput


def _figures(r: TargetRow) -> dict[str, Any]:
    """A row's predicted figures and memory, as the JSON and the CSV give them."""
    return {"predicted_throughput": round(r.predicted_throughput, 2),
            "predicted_throughput_per_rank": round(r.predicted_throughput_per_rank, 2),
            "predicted_wait_ratio": round(r.predicted_wait_ratio, 4), "cpu_bound": r.cpu_bound,
            "measured_throughput": r.measured_throughput, "ram_need_gb": _round(r.memory.ram_gb, 3),
            "shm_need_gb": round(r.memory.shm_gb, 4), "fits": r.memory.fits, "recommended": r.recommended}


@dataclass(frozen=True)
class Choice:
    """What a forecast recommends: the cheapest config predicted within `tolerance` of the best
    that fits the target, the source's own pick predicted there, and the notes that go with them
    (which loader was predicted, that nothing fits)."""

    recommended: TargetRow | None
    tolerance: float
    source_pick: TargetRow | None = None  # the source's own recommendation, predicted for the target
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Fit:
    """The model behind a forecast and how far to trust it on the target."""

    model: PipelineModel
    # the model's error on the file: median |predicted/measured - 1| over the trials predicted
    # before they ran, and how many (model.prediction_error): the sweep's own `model.error`
    error: tuple[float | None, int] = (None, 0)
    # the model's figures no measured row shows, kept neutral, that a config predicted needs:
    # (figure, the run that would show it) (model.unshown_figures)
    neutral: tuple[tuple[str, str], ...] = ()
    extrapolated: tuple[str, ...] = ()  # what lies beyond the measured range, and how far
    # the start figure that persistent workers decide, read from the configs measured with and
    # without them where no row shows it (predict.read_persistence); None: none read
    read: str | None = None


@dataclass(frozen=True)
class Carried:
    """What the paste line carries besides the recommended settings."""

    # the watched loader's other DataLoader keywords, carried into the paste line, and what it had
    # that no keyword carries (its own sampler), to keep as it is
    kept: dict[str, Any] = field(default_factory=dict)
    aside: tuple[str, ...] = ()
    # where the loader's other settings would be (NAME.loader.json) when nothing beside the CSV
    # says them: the paste line then says to keep them as in the user's code
    unknown_rest: str | None = None


@dataclass(frozen=True)
class Forecast:
    """The space predicted for a target, best first, and the recommendation."""

    source: Source
    target: ResolvedTarget
    rows: tuple[TargetRow, ...]
    choice: Choice
    fit: Fit
    carried: Carried = field(default_factory=Carried)

    @property
    def recommended(self) -> TargetRow | None:
        """The recommended row (Choice.recommended)."""
        return self.choice.recommended

    @property
    def extrapolated(self) -> tuple[str, ...]:
        """What lies beyond the measured range, and how far (Fit.extrapolated)."""
        return self.fit.extrapolated

    @property
    def model_error(self) -> ModelError:
        """The model's error on the file, as the sweep's summary and `loadtune report` word it."""
        return ModelError(*self.fit.error)

    @property
    def carried_share(self) -> float | None:
        """What the source's pick would run on the target, as a share of the recommendation (by
        TargetRow.figure: as measured, where both were measured on this very machine)."""
        pick, best = self.choice.source_pick, self.choice.recommended
        if pick is None or best is None:
            return None
        return pick.figure / best.figure

    def to_json(self) -> dict[str, Any]:
        """What `loadtune predict --json` prints (docs/reference.md)."""
        def row(r: TargetRow) -> dict[str, Any]:
            return {"config": r.config, "settings": r.settings, **_figures(r)}

        source, target, choice = self.source, self.target, self.choice
        return {
            "source": {"cores": source.cores, "ranks": source.ranks, "batch_size": source.batch_size,
                       "step_ms": round(source.step_ms, 3),
                       "step_ms_range": [round(v, 3) for v in source.step_ms_range],
                       "scale": source.scale, "ram_gb": source.ram_gb, "shm_gb": source.shm_gb,
                       "pick": choice.source_pick.config if choice.source_pick else None, "run": source.run},
            "target": {"cores": target.cores, "ranks": target.ranks, "step_ms": _round(target.step_ms, 3),
                       "scale": target.scale, "ram_gb": target.ram_gb, "shm_gb": target.shm_gb},
            "tolerance": choice.tolerance,
            "recommended": row(choice.recommended) if choice.recommended else None,
            "source_pick": row(choice.source_pick) if choice.source_pick else None,
            "source_pick_share": _round(self.carried_share, 4),
            "extrapolated": list(self.fit.extrapolated),
            "notes": list(choice.notes),
            "neutral": [{"figure": name, "value": self.fit.model.figure(name), "shown_by": run}
                        for name, run in self.fit.neutral],
            "model": {**self.fit.model.to_json(), **self.model_error.to_json()},
            "rows": [row(r) for r in self.rows],
        }

    def table_rows(self) -> list[dict[str, Any]]:
        """The rows as `--out` writes them: one flat dict per config."""
        return [{"config": r.config, **{k: r.settings.get(k) for k in SETTING_COLUMNS}, **_figures(r),
                 "target_cores": self.target.cores, "target_ranks": self.target.ranks,
                 "target_step_ms": _round(self.target.step_ms, 3), "target_scale": self.target.scale}
                for r in self.rows]


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


@dataclass(frozen=True)
class TransferCheck:
    """What the model fitted to one file predicted for another file's machine, against what that
    file measured there."""

    target: ResolvedTarget
    predicted_pick: str  # the config the model recommended for B's machine
    pick_measured_share: float | None  # its measured throughput in B / B's measured best (None: B did not measure it)
    measured_best: str  # B's fastest measured config
    median_error: float  # median |predicted / measured - 1| over B's measured configs
    compared: int
    predicted: dict[str, float]  # B's trial name -> what A's model predicted for it on B's machine


# A run agrees with what the sweep said of its config when its throughput is within this share of
# the sweep's figure and its wait ratio within this much of it.
RUN_AGREES_SHARE = 0.10
RUN_AGREES_WAIT_RATIO = 0.05
MEASURED, PREDICTED = "measured", "predicted"


@dataclass(frozen=True)
class RunCheck:
    """What a sweep said of a watched loader's config (measured, where the sweep ran that config
    on a machine like the run's; else predicted by its model for the run's machine), beside what
    the real run measured."""

    trial: str  # the watched loader, its ranks combined
    config: str  # its settings
    ranks: int
    throughput: float  # what the run measured, all ranks
    wait_ratio: float
    sweep_throughput: float | None  # what the sweep said of this config (None: it cannot say)
    sweep_wait_ratio: float | None
    figure: str | None  # MEASURED or PREDICTED
    sweep_trial: str | None = None  # the sweep's trial of this config, where it measured it
    target: ResolvedTarget | None = None  # the run's machine, where predicted for it
    pick: str | None = None  # the config the sweep's model recommends for the run's machine
    pick_throughput: float | None = None  # and its prediction there

    @property
    def ratio(self) -> float | None:
        """The run's throughput / the sweep's figure for it."""
        return self.throughput / self.sweep_throughput if self.sweep_throughput else None

    @property
    def agrees(self) -> bool | None:
        """Within RUN_AGREES_SHARE in throughput and RUN_AGREES_WAIT_RATIO in wait ratio."""
        if self.ratio is None or self.sweep_wait_ratio is None:
            return None
        return abs(self.ratio - 1) <= RUN_AGREES_SHARE and \
            abs(self.wait_ratio - self.sweep_wait_ratio) <= RUN_AGREES_WAIT_RATIO
