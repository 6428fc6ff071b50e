"""The pipeline model in the sweep process: fitted to the trials measured so far (refitted when
they change), each new trial's prediction before it runs, the contenders it ties, and the
configs of the space it scores without measuring them."""

from __future__ import annotations

import itertools
import math
from typing import Any, Mapping, Sequence

from loadtune.asked.config import Config
from loadtune.asked.plan import config_key, grid_plan
from loadtune.asked.trials import FEED_MEMORY, Trial
from loadtune.core.kinds import RankBy, Status
from loadtune.decide.choice import contends
from loadtune.decide.selection import Ties
from loadtune.decide.stats import ProcessNoise
from loadtune.measure.records import trial_record
from loadtune.model.fitted import PipelineModel, Prediction
from loadtune.model.model import ModelReport, fit, leave_one_out_error, prediction_error
from loadtune.present.sweep import ModelTie
from loadtune.record.findings import ModelFellBack
from loadtune.record.record import Record
from loadtune.sweep_process import events
from loadtune.sweep_process.trial_run import TrialRun

# Two trials the model explains as equal are tied when their measured throughputs differ by at
# most this many standard deviations of the spread between processes (about 95%).
TIE_SPREADS = 2.0


class Modelling:
    """The model over the sweep's runs (the strategy's Modeler)."""

    def __init__(self, runs: Mapping[str, TrialRun], config: Config, emit: events.OnEvent) -> None:
        self.runs, self.config, self.emit = runs, config, emit
        self._model: tuple[tuple[Any, ...], PipelineModel | None] | None = None
        self._held_out: float | None = None
        self.model_fell_back = False
        self.ties: Ties = frozenset()
        self.tie_notes: tuple[ModelTie, ...] = ()

    @property
    def records(self) -> list[Record]:
        return [r.record for r in self.runs.values() if r.record is not None]

    def _modelled(self) -> list[Record]:
        """The records the model is fitted to: trials measured in this sweep that ran (the ideal
        and trials the data check flagged are not the pipeline), each window in full (a window
        racing ended early holds no epoch's end, which persistence and the epoch start are read from)."""
        return [run.record for name, run in self.runs.items()
                if run.record is not None and contends(name, run.record.ran, run.flagged) and not run.pending
                and not run.cut_short]

    def fit(self) -> PipelineModel | None:
        """The pipeline model fitted to every trial measured so far (None with too few)."""
        records = self._modelled()
        key = tuple((r.trial, r.measuring.repeats, r.throughput) for r in records)
        if self._model is None or self._model[0] != key:
            self._model = (key, fit(records, baseline=self.config.loader.model_dump()))
        return self._model[1]

    def held_out_error(self) -> float | None:
        """Median |predicted / measured - 1| of each measured trial, by the model fitted to the
        others (a fit for each: taken once, when the strategy asks after the first round)."""
        if self._held_out is None:
            self._held_out = leave_one_out_error(self._modelled())
        return self._held_out

    def error(self) -> float | None:
        """How far off the model's predictions have been: the larger of its held-out error on the
        first round (each trial predicted by the model fitted to the others; only once the model
        strategy has taken it: held_out_error) and its error on the trials predicted before they
        ran (median |predicted / measured - 1| of each)."""
        before, checked = prediction_error(self.records)
        errors = [e for e in (self._held_out, before if checked else None) if e is not None]
        return max(errors) if errors else None

    def ahead(self, a: Trial, b: Trial, by: RankBy) -> bool:
        """Whether the model, off by at most its own error, still predicts `a` ahead of `b` by
        more than the tolerance (never when it fell back: it does not fit the pipeline)."""
        model, error = self.fit(), self.error()
        if model is None or error is None or self.model_fell_back:
            return False
        margin = self.config.measure.tolerance + error
        pa, pb = model.predict(a.loader_kwargs), model.predict(b.loader_kwargs)
        if by == RankBy.THROUGHPUT:
            return pa.throughput > pb.throughput * (1 + margin)
        return pa.wait_ratio < pb.wait_ratio - margin

    def fell_back(self, error: float | None) -> None:
        self.model_fell_back = True
        self.emit(events.Notice(str(ModelFellBack(held_out=error, too_few=error is None))))

    def report(self) -> ModelReport | None:
        model = self.fit()
        if model is None:
            return None
        error, checked = prediction_error(self.records)
        return ModelReport(model, error, checked, self.model_fell_back)

    def predict_new(self, trials: Sequence[Trial]) -> dict[str, Prediction]:
        """Each new trial's prediction, before it runs (the CSV then shows how good the model is),
        by name; none for a trial fed from memory, nor before there is a model."""
        model = self.fit() if any(t.feed != FEED_MEMORY for t in trials) else None
        if model is None:
            return {}
        return {t.name: model.predict(t.loader_kwargs) for t in trials if t.feed != FEED_MEMORY}

    def tie(self, contenders: Sequence[TrialRun], noise: ProcessNoise | None) -> None:
        """Pairs of contenders the model explains as equal (both hide the fetch: the workers outpace
        the loop on uncrowded cores, so its own time sets the pace; and they are predicted within
        the tolerance of each other) whose measurements agree within the spread between processes
        (the pooled spread of repeats; before any trial has two, the spread of the model's fit)."""
        model = self.fit()
        self.ties, self.tie_notes = frozenset(), ()
        if model is None or self.model_fell_back:
            return
        tolerance = self.config.measure.tolerance
        if noise is not None:
            spread, source = noise.throughput_log_sd, "processes"
        else:
            spread, source = model.residual_log_sd, "model"
        ran = [run for run in contenders if run.score is not None and run.score.ran]
        predicted = {run.trial.name: model.predict(run.trial.loader_kwargs) for run in ran}
        throughput_of = {run.trial.name: run.score.measured_throughput.mean for run in ran if run.score is not None}
        ties, notes = set(), []
        for a, b in itertools.combinations(ran, 2):
            pa, pb = predicted[a.trial.name], predicted[b.trial.name]
            ratio = pb.throughput / pa.throughput
            measured = throughput_of[b.trial.name] / throughput_of[a.trial.name]
            judged = spread * math.sqrt(1 / max(a.repeats, 1) + 1 / max(b.repeats, 1))
            # Equal by the mechanism: both hide the fetch, the loop's own time sets the pace. Configs
            # the cores pace, or a close race of queues, can differ by more than the model can tell.
            if pa.fetch_hidden and pb.fetch_hidden and abs(ratio - 1) <= tolerance \
                    and abs(math.log(measured)) <= TIE_SPREADS * judged:
                ties.add(frozenset((a.trial.name, b.trial.name)))
                notes.append(ModelTie(a.trial.name, b.trial.name, ratio, measured, spread, source))
        self.ties, self.tie_notes = frozenset(ties), tuple(notes)

    def predicted_records(self, accelerator: bool, context: Mapping[str, Any]) -> list[Record]:
        """Every config of the space (each combination of the swept values) that was not measured,
        with the final model's prediction: status `predicted`, never ranked or recommended."""
        model = self.fit()
        if model is None:
            return []
        cfg = self.config
        measured = {config_key(run.trial) for run in self.runs.values() if run.trial.settings}
        out = []
        for trial in grid_plan(cfg, accelerator):
            if trial.skipped or config_key(trial) in measured or trial.name in self.runs:
                continue
            guess = model.predict(trial.loader_kwargs)
            out.append(trial_record(trial, context, round_no=None, status=Status.PREDICTED,
                                    reason="not measured: the pipeline model predicts it",
                                    predicted_throughput=guess.throughput, predicted_wait_ratio=guess.wait_ratio))
        return out

