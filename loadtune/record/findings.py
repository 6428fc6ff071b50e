"""What a sweep noticed beside its figures, as typed values (hyperfine's warnings): the sweep
builds them, tests compare them, and the output words them (`str(finding)`). A finding that
`asks` is a warning, printed always; the others are notes, shown with --verbose."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

# The processes a rerun takes an unstable trial to, at least: and always more than it holds.
UNSTABLE_RERUN_REPEATS = 5


def unstable_remedy(repeats: int) -> str:
    """What to do about results processes do not agree on, held in at most `repeats` processes: a
    rerun that measures them again (min_repeats takes every contender to N processes, where more
    --repeats alone adds none to a pick already decided)."""
    n = max(UNSTABLE_RERUN_REPEATS, repeats + 2)
    return (f"rerun with --resume --repeats {n} --set measure.min_repeats={n} (keeps what was measured and "
            f"takes each contender to {n} processes), or --overwrite with a longer --batches, or close other "
            "programs")


def _cores(cores: float) -> str:
    return f"{cores:g} usable core{'' if cores == 1 else 's'}"


@dataclass(frozen=True)
class Finding:
    asks: ClassVar[bool] = False  # a warning: it asks the user to do something

    def words(self) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.words()


@dataclass(frozen=True)
class ThreadsOversubscribed(Finding):
    """The workers' library thread pools (OpenMP, MKL, OpenCV) outnumber the cores."""

    asks: ClassVar[bool] = True
    trial: str
    num_workers: int
    computing_threads: float  # per worker: its main thread and the pools' threads
    cores: float

    def words(self) -> str:
        total = self.num_workers * self.computing_threads
        return (f"{self.trial}: {self.num_workers} workers × {self.computing_threads:.0f} computing threads = "
                f"{total:.0f} threads on {_cores(self.cores)}: OpenMP/MKL/OpenCV thread pools inside the workers "
                "compete for the cores; export OMP_NUM_THREADS=1 before the run (or call "
                "threadpoolctl.threadpool_limits(1) in worker_init_fn) and call cv2.setNumThreads(0) in "
                "worker_init_fn.")


@dataclass(frozen=True)
class BusyMachine(Finding):
    """Repeats were measured again because other processes used the cores."""

    asks: ClassVar[bool] = True
    disturbed: tuple[tuple[str, int], ...]  # (trial, repeats measured again)
    max_outside_cpu: float

    def words(self) -> str:
        listed = "; ".join(f"{trial} ({count})" for trial, count in self.disturbed)
        return (f"the machine was busy: repeats measured again because other processes used more than "
                f"{self.max_outside_cpu:g} of the cores: {listed}. See outside_cpu, and rerun on a quiet machine "
                "to be sure")


@dataclass(frozen=True)
class WorkersBeyondCores(Finding):
    """Some trials ran more workers than there are cores."""

    most: int  # workers of the largest trial, over all ranks
    cores: int
    ranks: int = 1

    def words(self) -> str:
        per = f" ({self.ranks} ranks with their own workers)" if self.ranks > 1 else ""
        return (f"trials with up to {self.most} workers{per} on {self.cores} usable cores: workers beyond the cores "
                "compete with the training step; trust throughput over wait ratio for those")


@dataclass(frozen=True)
class Unstable(Finding):
    """A trial's throughput interval is wider than NOISY_RELATIVE_SPREAD of its mean."""

    trial: str
    spread: float  # half the interval's width over the mean
    repeats: int = 1  # the processes it holds

    def words(self) -> str:
        return f"{self.trial}: unstable result, throughput ±{self.spread * 100:.0f}%: {unstable_remedy(self.repeats)}"


@dataclass(frozen=True)
class ManyUnstable(Finding):
    """More trials are unstable than are worth naming one by one."""

    count: int
    least: float
    most: float
    first: tuple[str, ...]
    repeats: int = 1  # the most processes one of them holds

    def words(self) -> str:
        return (f"{self.count} trials have unstable results, throughput ±{self.least * 100:.0f}% to "
                f"±{self.most * 100:.0f}% (first: {'; '.join(self.first)}): processes differ that much from one "
                f"repeat to the next here; {unstable_remedy(self.repeats)}")


@dataclass(frozen=True)
class Disagreement(Finding):
    """The lowest wait ratio is not among the fastest trials."""

    lean: str  # the trial that waits least

    def words(self) -> str:
        return (f"wait ratio and throughput disagree: {self.lean} waits least but is not among the fastest; its "
                "workers probably slow the step itself (CPU contention). Throughput is what training feels")


@dataclass(frozen=True)
class NotChecked(Finding):
    """The data check could not compare some trials."""

    count: int
    total: int
    reason: str

    def words(self) -> str:
        return f"not checked for {self.count} of {self.total} trials: {self.reason}"


@dataclass(frozen=True)
class ComparedByLabels(Finding):
    """The samples' bytes change per read, so trials were compared by labels or indices."""

    def words(self) -> str:
        return ("the samples' bytes change from one read to the next (random augmentation?): trials were compared "
                "by their labels or indices instead")


@dataclass(frozen=True)
class RepeatingSampler(Finding):
    """Every trial's sampler hands out some indices twice in an epoch."""

    repeated: int  # in the trial that repeats least
    samples: int

    def words(self) -> str:
        return (f"the sampler hands out some indices twice within an epoch in every trial ({self.repeated} of "
                f"{self.samples} in the trial that repeats least), so trials were compared with each other: give "
                "each index once per epoch, unless that is by design (oversampling)")


# Above this median |predicted / measured - 1| the pipeline model does not fit the pipeline:
# its predictions are not trusted over the measurements (ModelError), and the model strategy,
# whose first round it predicts that badly, measures as ofat does (ModelFellBack).
MODEL_FIT_ERROR = 0.15


@dataclass(frozen=True)
class ModelError(Finding):
    """The pipeline model's error on a file: the median |predicted / measured - 1| over the
    measured trials it predicted before they ran (each row's predicted_throughput against its
    throughput: model.prediction_error), and how many; `--json` `model.error` and
    `model.error_trials`. One figure, one wording: the sweep's summary, `loadtune report` and
    `loadtune predict` say it alike."""

    error: float | None
    trials: int  # how many trials it was taken over

    def words(self) -> str:
        if self.error is None:
            return "Model: no trial was predicted before it ran, so its error on this file is not known."
        over = "1 trial predicted before it ran" if self.trials == 1 else \
            f"{self.trials} trials predicted before they ran"
        verdict = f"; above {MODEL_FIT_ERROR:.0%}: it does not fit this pipeline well, trust the measurements, " \
            "not the predicted rows" if self.error > MODEL_FIT_ERROR else ""
        return (f"Model: its error on this file is {self.error:.0%} (median |predicted/measured - 1| over {over})"
                f"{verdict}.")

    def to_json(self) -> dict[str, float | int | None]:
        """As `--json` gives it, beside the model's parameters."""
        return {"error": None if self.error is None else round(self.error, 4), "error_trials": self.trials}


@dataclass(frozen=True)
class ModelFellBack(Finding):
    """The model strategy measured as ofat does: after the first round, the model fitted to the
    others predicted each first-round trial worse than `limit` (median; `held_out`, where known),
    or too few trials ran to fit it. Another figure than ModelError's, named for what it is."""

    limit: float = MODEL_FIT_ERROR
    held_out: float | None = None
    too_few: bool = False

    def words(self) -> str:
        if self.too_few:
            return "too few trials ran to fit the pipeline model after the first round: the sweep measured as ofat does"
        figure = f"{self.held_out:.0%} off" if self.held_out is not None else f"more than {self.limit:.0%} off"
        return (f"after the first round, the pipeline model fitted to the others predicted each first-round trial "
                f"{figure} (median), above the {self.limit:.0%} the model strategy allows: the sweep measured as ofat "
                "does")


@dataclass(frozen=True)
class CheaperWaitsMore(Finding):
    """`loadtune predict`'s recommendation, the cheapest config predicted within the tolerance of
    the best samples/s, waits clearly more than another predicted about as fast: the time one
    saves waiting for data its workers add to the step (they crowd the cores the step runs on) or,
    on ranks, to waiting for the slowest rank; samples/s is what training feels."""

    pick: str
    pick_wait_ratio: float
    lean: str  # the config about as fast that waits least
    lean_wait_ratio: float
    lean_share: float  # its predicted samples/s over the pick's
    tolerance: float
    ranks: int = 1

    def words(self) -> str:
        where = "the step (its workers crowd the cores the step runs on)" if self.ranks == 1 else \
            "the step (its workers crowd the cores the step runs on) or to waiting for the slowest rank"
        return (f"Wait ratio: the recommendation waits {self.pick_wait_ratio:.3f} of the time and {self.lean} "
                f"{self.lean_wait_ratio:.3f}, yet that one is predicted at {self.lean_share:.2f}x its samples/s, "
                f"within {self.tolerance:.0%}: what it saves waiting for data goes to {where}. Samples/s is what "
                "training feels, so the cheaper config is recommended.")
