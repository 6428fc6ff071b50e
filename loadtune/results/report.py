"""What the user reads: the ranked table, the ready-to-paste DataLoader line, the summary (the
closing lines and --json). Builds renderables and plain data; printing is the CLI's job."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from rich.table import Table
from rich.text import Text

from loadtune.kinds import EndedBy, RankBy, Status
from loadtune.results.choice import dataloader_line, record_contends, recorded_settings
from loadtune.results.findings import Finding, ManyUnstable, ModelError, ModelFellBack
from loadtune.results.interval import unstable_note
from loadtune.results.model import ModelReport, prediction_error
from loadtune.results.record import DATA_FLAGGED, MEASURED_STATUSES, Record, rank_file
from loadtune.results.table import Cell, Column, fitted_table
from loadtune.text import STATUS_STYLE
from loadtune.text import fmt as _fmt
from loadtune.trials import BASELINE, IDEAL

if TYPE_CHECKING:
    from loadtune.results.decision import Decision, ModelTie

# Undecided contenders named in the summary, and unstable trials warned about one by one;
# the rest are counted (the table lists them all).
NAMED_UNDECIDED = 3
NAMED_UNSTABLE = 3

def _interval(record: Record, key: str, digits: int) -> str:
    lo, hi = getattr(record, key + "_lo"), getattr(record, key + "_hi")
    return f"{_fmt(getattr(record, key), digits)} [{_fmt(lo, digits)}, {_fmt(hi, digits)}]"


# Shorter words for settings in trial names, where a narrow table needs them.
SHORT_KEYS = {"num_workers": "workers", "prefetch_factor": "prefetch", "persistent_workers": "persistent",
              "pin_memory": "pinned", "in_order": "in-order", "main_threads": "main-threads",
              "worker_threads": "worker-threads", "batch_size": "batch"}


def short_trial(name: str) -> str:
    """A trial's name in fewer characters: `num_workers=2, prefetch_factor=4, persistent_workers=true`
    reads `workers=2 prefetch=4 persistent`."""
    parts = []
    for part in name.split(", "):
        key, eq, value = part.partition("=")
        if not eq:
            return name  # baseline, ideal, or a name of the user's
        word = SHORT_KEYS.get(key, key)
        parts.append(word if value == "true" else f"no-{word}" if value == "false" else f"{word}={value}")
    return " ".join(parts)


# The ranked table's columns, in order, and how soon each is left out when the output is narrow
# (0: never; the CSV holds them all).
RESULT_COLUMNS = {"rank": 0, "trial": 0, "samples/s [95%]": 0, "predicted": 4, "wait ratio [95%]": 1,
                  "speedup": 2, "% of ideal": 3, "wait ms": 5, "p95 ms": 8, "step ms": 6, "1st batch s": 9,
                  "epoch start ms": 7}


def results_table(records: Sequence[Record], title: str = "", width: int | None = None) -> Table:
    """The ranked table: `=` marks trials tied with the best; rows that did not run are dimmed;
    `predicted` is what the pipeline model said before the trial ran. Configs only predicted,
    never measured, are left out (predicted_lines says how many; the CSV holds them), and so are
    a real run's rows (watched.watched_table shows them). At `width`, the least important
    columns are left out, and trial names shortened, rather than a figure cut."""
    records = [r for r in records if not r.predicted_only and not r.watched]
    predicted = any(r.predicted_throughput is not None for r in records)  # files before the model have none
    cells: dict[str, list[Cell]] = {name: [] for name in RESULT_COLUMNS}
    names, styles = [], []
    for r in records:
        names.append(f"{r.trial or ''} ({r.data_check})" if r.status == Status.OK and r.data_flagged else r.trial or "")
        if r.status != Status.OK:
            status = r.status or ""
            row: dict[str, Cell] = {"rank": "-", "samples/s [95%]": Text(status, style=STATUS_STYLE.get(status, ""))}
            styles.append("dim")
        else:
            mark = "=" if r.tied_with_best else ""
            row = {
                "rank": "-" if r.data_flagged else f"{mark}{_fmt(r.rank)}" if r.rank is not None else "ref",
                "samples/s [95%]": _interval(r, "throughput", 1),
                "predicted": _fmt(r.predicted_throughput, 1),
                "wait ratio [95%]": _interval(r, "wait_ratio", 3),
                "speedup": _fmt(r.speedup), "% of ideal": _fmt(r.pct_of_ideal, 1),
                "wait ms": _fmt(r.wait_ms, 1), "p95 ms": _fmt(r.wait_p95_ms, 1), "step ms": _fmt(r.step_ms, 1),
                "1st batch s": _fmt(r.first_batch_s, 2), "epoch start ms": _fmt(r.epoch_start_ms, 1),
            }
            styles.append("bold" if r.rank == 1 else "yellow" if r.data_flagged else "")
        for name in RESULT_COLUMNS:
            if name != "trial":
                cells[name].append(row.get(name, ""))
    shown = [n for n in RESULT_COLUMNS if predicted or n != "predicted"]

    def columns(trial_names: list[str]) -> list[Column]:
        return [Column(n, tuple(trial_names if n == "trial" else cells[n]), "left" if n == "trial" else "right",
                       RESULT_COLUMNS[n], names=n == "trial") for n in shown]

    short = [short_trial(n) for n in names]
    return fitted_table([columns(names)] + ([columns(short)] if short != names else []), width, title or None, styles)


# How each row that gave no figures is listed: those that ran and failed, or ran past their
# time, by what happened; those refused before they ran as not run.
UNRAN_WORDS = {str(Status.FAILED): "failed", str(Status.TIMEOUT): "timeout", str(Status.SKIPPED): "not run"}


def not_run_lines(records: Sequence[Record], skipped: bool = True) -> list[str]:
    """The trials without figures, each with what happened and why: `failed: T: reason` (it ran
    and failed), `timeout: T: reason` (it ran past measure.timeout_s), `not run: T: reason`
    (skipped before it ran); without `skipped`, the first two only."""
    return [f"{UNRAN_WORDS.get(str(r.status), str(r.status))}: {r.trial}: {r.reason or 'no reason given'}"
            for r in records if r.status not in MEASURED_STATUSES and not r.predicted_only
            and (skipped or r.status != Status.SKIPPED)]


def failure(records: Sequence[Record]) -> str | None:
    """Why no trial gave figures, naming the first failure's reason (the baseline's where it
    failed), as the error a sweep without one ends with; None when a trial ran (the ideal, a
    reference, is no trial)."""
    if any(r.status == Status.OK and r.trial != IDEAL for r in records):
        return None
    unran = [r for r in records if r.status not in MEASURED_STATUSES and not r.predicted_only and r.trial != IDEAL]
    failed = [r for r in unran if r.status != Status.SKIPPED] or unran
    first = next((r for r in failed if r.trial == BASELINE), failed[0] if failed else None)
    if first is None:
        return "no trial ran successfully: the sweep had no trial to run"
    what = "ran past its time" if first.status == Status.TIMEOUT else \
        "was not run" if first.status == Status.SKIPPED else "failed"
    return f"no trial ran successfully; the first, {first.trial}, {what}: {first.reason or 'no reason given'}"


def predicted_lines(records: Sequence[Record]) -> list[str]:
    """One line on the configs of the space the model predicted and the sweep did not measure."""
    only = [r for r in records if r.predicted_only and r.predicted_throughput is not None]
    if not only:
        return []
    best = max(only, key=lambda r: r.predicted_throughput or 0.0)
    what = "1 more config of the space was" if len(only) == 1 else f"{len(only)} more configs of the space were"
    return [f"{what} predicted, not measured (status predicted in the CSV); the best of them: {best.trial}, "
            f"{best.predicted_throughput:.1f} samples/s predicted."]


def flagged_lines(records: Sequence[Record]) -> list[str]:
    """The trials the data check kept out of the ranking, with what is wrong."""
    return [f"{r.trial}: {r.reason or 'data_check ' + str(r.data_check)}" for r in records
            if r.status == Status.OK and r.data_flagged]


BRIEF = ("trial", "rank", "status", "throughput", "throughput_lo", "throughput_hi", "wait_ratio",
         "wait_ratio_lo", "wait_ratio_hi", "speedup", "tied_with_best", "num_workers", "prefetch_factor",
         "persistent_workers", "pin_memory", "batch_size", "pct_of_ideal", "verdict", "advice", "data_check")


def brief(record: Record | None) -> dict[str, Any] | None:
    """A record's headline figures and settings, as --json gives them."""
    return None if record is None else _brief(record)


def _brief(record: Record) -> dict[str, Any]:
    return {k: getattr(record, k) for k in BRIEF}


@dataclass(frozen=True)
class Flagged:
    """A trial the data check flagged: it delivered other samples than the baseline."""

    trial: str
    data_check: str  # duplicates or different
    reason: str  # what is wrong
    fixes: tuple[str, ...] = ()  # the cause and its fix, one sentence each


@dataclass(frozen=True)
class DataFindings:
    """What the data check found over a sweep: the trials flagged, and why some were not checked."""

    flagged: tuple[Flagged, ...] = ()
    notes: tuple[Finding, ...] = ()

    def lines(self) -> list[str]:
        lines = []
        if self.flagged:
            named = "; ".join(f"{f.trial} ({f.data_check}: {f.reason})" for f in self.flagged)
            lines.append(f"Not ranked or recommended, by the data check: {named}.")
            for fix in dict.fromkeys(fix for f in self.flagged for fix in f.fixes):
                lines.append(f"  {fix}")
        lines.extend(f"Data check: {note}." for note in self.notes)
        return lines

    def short_line(self) -> str:
        """The flagged trials in one line, with the first fix."""
        named = "; ".join(f"{f.trial} ({f.data_check}: {f.reason})" for f in self.flagged)
        fix = next((fix for f in self.flagged for fix in f.fixes), "")
        return f"Not ranked: {named}. {fix}".rstrip()

    def to_json(self) -> dict[str, Any]:
        return {"flagged": [dataclasses.asdict(f) for f in self.flagged], "notes": [str(n) for n in self.notes]}


@dataclass(frozen=True)
class OneRank:
    """The one-rank sweep of the same config, set beside a sweep on several ranks."""

    csv: str
    trial: str | None = None  # its recommendation, when that CSV has one
    throughput: float | None = None


@dataclass(frozen=True)
class Travel:
    """The pick for one common target, when it differs from the sweep's (transfer.travel)."""

    label: str
    config: str
    share: float  # what the sweep's pick would run there, as a share of this config's prediction


@dataclass(frozen=True)
class Summary:
    """What a sweep concluded: the closing lines and --json."""

    output: str
    config: str
    scale: float
    scaled: str | None
    device: str
    ranks: int
    rank_by: str
    strategy: str
    warnings: tuple[Finding | str, ...]  # worded at output: str(w)
    baseline: Record | None
    best: Record | None
    recommended: Record | None
    ideal_throughput: float | None
    dataloader: str | None
    trials: tuple[Record, ...]
    one_rank: OneRank | None = None  # with ranks
    per_rank_csv: str | None = None  # with ranks
    out_given: bool = False  # the output path was given (so the one-rank sweep's is not known)
    torchrun: bool = False
    plot: str | None = None
    decision: Decision | None = None  # how sure the pick is
    source: str = "dataset"  # what the dataset factory returned
    factory: str | None = None
    loader_kwargs: dict[str, Any] | None = None  # the recommended trial's settings
    change: dict[str, Any] | None = None  # those that differ from the baseline's
    data: DataFindings | None = None  # the data check
    model: ModelReport | None = None  # the pipeline model fitted to the measured trials
    # The predicted pick on each common target where it is another config, and the targets where
    # the pick holds.
    travel: tuple[Travel, ...] = ()
    travel_same: tuple[str, ...] = ()
    notes: tuple[Finding | str, ...] = ()  # findings that ask nothing of the user: shown with --verbose
    # The recommendation's speedup over the baseline, as a 95% interval (None where the raw
    # figures were not at hand, as for trials kept by --resume).
    speedup_lo: float | None = None
    speedup_hi: float | None = None
    # Rebuilt from the CSV (loadtune report) rather than concluded by the sweep: the file holds
    # no racing decision, no raw draws for the speedup's interval and only the swept settings.
    rebuilt: bool = False
    swept_only: bool = False  # rebuilt, and the paste line holds the swept settings only (no NAME.loader.json)

    @property
    def advice_measured(self) -> list[dict[str, Any]]:
        """Trials a verdict's advice asked for, each against the trial whose verdict asked."""
        by_name = {r.trial: r for r in self.trials}
        out = []
        for r in self.trials:
            asker = by_name.get(r.asked_by) if r.asked_by else None
            if asker is not None:
                usable = r.ran and not r.data_flagged  # a flagged trial fed other samples: no gain to speak of
                gain = None
                if usable and r.throughput is not None and asker.ran and asker.throughput:
                    gain = r.throughput / asker.throughput
                out.append({"trial": r.trial, "asked_by": r.asked_by, "status": r.status,
                            "throughput": r.throughput, "gain": gain, "data_check": r.data_check})
        return out

    @property
    def equal_records(self) -> list[Record]:
        """The trials as good as the pick within this machine's noise (either will do)."""
        names = self.decision.equal if self.decision is not None else ()
        by_name = {r.trial: r for r in self.trials}
        return [by_name[name] for name in names if name in by_name]

    @property
    def decided(self) -> bool | None:
        return self.decision.decided if self.decision is not None else None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "output": self.output, "config": self.config, "scale": self.scale, "scaled": self.scaled,
            "device": self.device, "ranks": self.ranks, "rank_by": self.rank_by, "strategy": self.strategy,
            "warnings": [str(w) for w in (*self.warnings, *self.notes)], "baseline": brief(self.baseline),
            "ideal_throughput": self.ideal_throughput, "best": brief(self.best),
            "recommended": brief(self.recommended), "dataloader": self.dataloader,
            "decided": self.decided,
            "tolerance": self.decision.tolerance if self.decision is not None else None,
            "undecided": list(self.decision.undecided) if self.decision is not None else [],
            "at_most_lost": self.decision.gap if self.decision is not None else None,
            "expected_lost": self.decision.expected if self.decision is not None else None,
            "equal": [brief(r) for r in self.equal_records],
            "advice_measured": self.advice_measured,
            "source": self.source,
            "loader_kwargs": self.loader_kwargs,
            "change": self.change,
            "trials": [{**_brief(r), "reason": r.reason or None} for r in self.trials],
            "data_check": self.data.to_json() if self.data is not None else None,
            "model": self.model.to_json() if self.model is not None else None,
            "ties": [dataclasses.asdict(t) for t in (self.decision.ties if self.decision is not None else ())],
            "travel": [dataclasses.asdict(t) for t in self.travel],
            "travel_same": list(self.travel_same),
            "notes": [str(n) for n in self.notes],
            "speedup_interval": [self.speedup_lo, self.speedup_hi] if self.speedup_lo is not None else None,
            "summary": summary_lines(self),
            "rebuilt": self.rebuilt,
        }
        if self.ranks > 1:
            one = self.one_rank
            data.update(per_rank_csv=self.per_rank_csv, out_given=self.out_given, torchrun=self.torchrun,
                        one_rank=dataclasses.asdict(one) if one is not None and one.trial else None,
                        one_rank_csv=one.csv if one is not None else None)
        if self.plot is not None:
            data["plot"] = self.plot
        return data


def summarize_sweep(records: Sequence[Record], chosen: Record | None, loader_kwargs: Mapping[str, Any] | None,
                    baseline_kwargs: Mapping[str, Any] | None = None, **meta: Any) -> Summary:
    """The summary of a ranked sweep; `loader_kwargs` are the chosen trial's full settings,
    `baseline_kwargs` the baseline's (what to change in the user's own code is the difference)."""
    change = None
    if loader_kwargs is not None and baseline_kwargs is not None:
        change = {k: v for k, v in loader_kwargs.items()
                  if k not in baseline_kwargs or type(v) is not type(baseline_kwargs[k]) or v != baseline_kwargs[k]}
    return Summary(
        loader_kwargs=dict(loader_kwargs) if loader_kwargs is not None else None,
        change=change,
        baseline=next((r for r in records if r.trial == BASELINE), None),
        best=next((r for r in records if r.rank == 1), None),
        recommended=chosen,
        ideal_throughput=next((r.throughput for r in records if r.trial == IDEAL and r.status == Status.OK), None),
        dataloader=dataloader_line(loader_kwargs) if chosen is not None and loader_kwargs is not None else None,
        trials=tuple(records),
        **meta,
    )


def file_summary(records: Sequence[Record], output: str, travel: Sequence[Travel] = (),
                 travel_same: Sequence[str] = (), loaders: Mapping[str, Mapping[str, Any]] | None = None,
                 ) -> Summary | None:
    """A sweep's summary rebuilt from its CSV's rows, for `loadtune report` to end with the answer
    the sweep printed (summary_lines). What the file does not hold is left out: how sure racing
    was (the trials tied with the pick stand for it), the speedup's interval, what the factory
    returned. `loaders`: each trial's loader settings by name (NAME.loader.json beside the CSV),
    for the paste line the sweep printed; without the pick's, the paste line holds the swept
    settings and says so. `travel`, `travel_same`: where the pick moves on the common targets
    (transfer.travel, which reads this module). None when the file holds no sweep's rows (a
    watched run's only)."""
    from loadtune.results.choice import recommended

    rows = [r for r in records if not r.watched]
    if not rows:
        return None
    chosen = recommended(rows)
    base = next((r for r in rows if r.trial == BASELINE), None)
    first = rows[0]
    path = Path(output)
    per_rank = rank_file(path) if (first.ranks or 1) > 1 else None
    flagged = tuple(Flagged(r.trial or "", r.data_check or "", r.reason or f"data_check {r.data_check}")
                    for r in rows if r.status == Status.OK and r.data_flagged)
    loaders = loaders or {}

    def settings(record: Record) -> dict[str, Any]:
        return dict(loaders.get(record.trial or "") or recorded_settings(record))

    return summarize_sweep(
        rows, chosen, settings(chosen) if chosen is not None else None,
        settings(base) if base is not None and base.ran else None,
        output=output, config=first.config_name or path.stem, scale=first.scale if first.scale is not None else 1.0,
        scaled=None, device=first.device or "", ranks=first.ranks or 1, rank_by=_ranked_by(rows),
        strategy=first.strategy or "", warnings=(), notes=tuple(noise_warnings(rows)),
        per_rank_csv=str(per_rank) if per_rank is not None and per_rank.exists() else None,
        data=DataFindings(flagged) if flagged else None, travel=tuple(travel), travel_same=tuple(travel_same),
        rebuilt=True, swept_only=chosen is not None and not loaders.get(chosen.trial or ""))


def _ranked_by(records: Sequence[Record]) -> str:
    """What the rows were ranked by, as their order shows: throughput unless only the wait ratio
    agrees with the ranks."""
    ranked = sorted((r for r in records if r.rank is not None and r.throughput is not None
                     and r.wait_ratio is not None), key=lambda r: r.rank or 0)
    pairs = [(a, b) for a, b in zip(ranked, ranked[1:]) if (a.rank or 0) < (b.rank or 0)]
    by_throughput = all((a.throughput or 0) >= (b.throughput or 0) for a, b in pairs)
    by_wait = all((a.wait_ratio or 0) <= (b.wait_ratio or 0) for a, b in pairs)
    return str(RankBy.WAIT_RATIO) if by_wait and not by_throughput else str(RankBy.THROUGHPUT)


def _travel_lines(info: Summary) -> list[str]:
    """One line per common target where the model predicts another pick; else one saying it holds."""
    if info.travel:
        moved = "; ".join(f"with {t.label}, {t.config} (this pick would run {t.share:.2f} of it)" for t in info.travel)
        return [f"Elsewhere the pick moves (predicted): {moved}. For the machine you will train on: "
                f"loadtune predict {info.output} --cores N --ranks R --step-ms S"]
    if info.travel_same:
        same = info.travel_same
        listed = f"{', '.join(same[:-1])} or {same[-1]}" if len(same) > 1 else same[0]
        return [f"The pick holds (predicted) with {listed}."]
    return []


# The short answer names at most this many contenders that might still be faster.
NAMED_SHORT = 2


def summary_lines(info: Summary) -> list[str]:
    """The answer, in at most seven lines (the CLI adds the files written): what to set and what
    it gains, how sure that is, what to paste, what limits it now, and, where they apply, the
    trials the data check kept out, the ranks, and where the pick moves on another machine.
    Everything else is in detail_lines (--verbose) and `loadtune report`."""
    chosen, base = info.recommended, info.baseline
    if chosen is None:
        data = info.data.lines()[:1] if info.data is not None else []
        if info.data is not None and info.data.flagged:
            return ["No trial can be recommended: the data check flagged every trial that ran.", *data]
        if info.rebuilt:
            return ["No trial ran successfully: the lines under the table give each trial's reason."]
        return ["No trial ran successfully: see the reason column of the CSV (loadtune report shows it)."]
    lines = [_recommended_line(info, chosen, base) + behaviour_changed(info.change), _sure_line(info, chosen)]
    if info.source != "dataset" and info.change is not None:
        what = ", ".join(f"{k}={v!r}" for k, v in info.change.items()) or "nothing: the baseline is the pick"
        lines.append(f"Change in the {info.source} your factory {info.factory} builds: {what}; keep the rest as it is.")
    elif info.swept_only:
        lines.append(f"Paste: {info.dataloader}; keep the loader's other keywords as they are (the CSV holds "
                     "only the swept settings)")
    else:
        lines.append(f"Paste: {info.dataloader}")
    if chosen.verdict:
        lines.append(f"Bottleneck now: {chosen.verdict}; {chosen.advice or ''}".rstrip("; "))
    if info.data is not None and info.data.flagged:
        lines.append(info.data.short_line())
    lines.extend(_ranks_lines(info, chosen))
    lines.extend(_travel_lines(info) if info.travel else [])
    return lines


# Settings whose change alters what the training run does, not only how fast it is fed: a pick
# that changes one says so.
BEHAVIOUR = {"in_order": "batches may come out of order", "drop_last": "the last incomplete batch is dropped or kept",
             "shuffle": "the order of samples changes", "batch_size": "the model trains on batches of another size",
             "sampler": "other samples are drawn", "batch_sampler": "other batches are drawn"}


def behaviour_changed(change: Mapping[str, Any] | None) -> str:
    """The settings of a change that alter the training run's behaviour, as one clause ('' when none)."""
    named = [f"{key}={value!r} ({BEHAVIOUR[key]})" for key, value in (change or {}).items() if key in BEHAVIOUR]
    return f" It changes behaviour: {'; '.join(named)}." if named else ""


def _recommended_line(info: Summary, chosen: Record, base: Record | None) -> str:
    assert chosen.throughput is not None  # the recommendation ran
    figures = f"{chosen.throughput:.1f} samples/s"
    if base is not None and chosen.trial == base.trial:
        tol = f"{info.decision.tolerance:.0%}" if info.decision is not None else "the tolerance"
        return f"Recommended: keep the baseline ({figures}, wait ratio {chosen.wait_ratio:.3f}): no change is " \
               f"shown more than {tol} faster."
    if base is None or base.throughput is None or not base.ran or base.data_flagged:
        why = " (the baseline fed other samples: no speedup to give)" if base is not None and base.data_flagged \
            else ""
        return f"Recommended: {chosen.trial}: {figures}, wait ratio {chosen.wait_ratio:.3f}{why}."
    interval = f" [{info.speedup_lo:.2f}x, {info.speedup_hi:.2f}x]" if info.speedup_lo is not None else ""
    ideal = f", {chosen.pct_of_ideal:.0f}% of the ideal" if chosen.pct_of_ideal is not None else ""
    return (f"Recommended: {chosen.trial}: {figures}, {chosen.throughput / base.throughput:.2f}x the baseline's "
            f"{base.throughput:.1f}"
            f"{interval}; wait ratio {base.wait_ratio:.3f} -> {chosen.wait_ratio:.3f}{ideal}.")


def _spread_words(spread: float | None) -> str:
    return f"; repeats here differ by ±{spread:.0%} from process to process" if spread is not None else ""


def _settle(decision: Decision) -> str:
    """The one rerun that would settle an undecided pick."""
    more = max(2 * (decision.repeats or 1), 5)
    if decision.ended_by == EndedBy.KEPT:
        return "rerun with --overwrite instead of --resume (racing measures no trial kept from the file again)"
    if decision.ended_by == EndedBy.BUDGET:
        return "rerun with a larger --budget and --resume"
    # --resume keeps every repeat measured (its raw samples) and races the kept trials further,
    # until each contender is shown behind or equal to the pick within this machine's noise.
    return f"rerun with --repeats {more} --resume"


def _named(names: Sequence[str]) -> str:
    """At most NAMED_SHORT names, and how many more."""
    named = " or ".join(names[:NAMED_SHORT])
    more = len(names) - NAMED_SHORT
    return named + (f" (and {more} more)" if more > 0 else "")


def _listed(names: Sequence[str]) -> str:
    """At most NAMED_SHORT names, comma-separated, and how many more."""
    return ", ".join(names[:NAMED_SHORT]) + (f" and {len(names) - NAMED_SHORT} more" if len(names) > NAMED_SHORT
                                             else "")


def _equal_words(decision: Decision) -> str:
    """The configs a rerun might pick instead, that the pick is as good as within the noise."""
    listed = _listed(decision.equal)
    within = f" (±{decision.spread:.0%} between processes here)" if decision.spread is not None else ""
    return (f"{listed} ran as fast within this machine's noise{within}: a rerun may pick one of them, and this "
            f"one is expected to cost at most the {decision.tolerance:.0%} tolerance against each")


def _sure_line(info: Summary, chosen: Record) -> str:
    """One plain sentence on how sure the pick is."""
    decision, best = info.decision, info.best
    if decision is None and info.rebuilt:
        tied = [r.trial or "" for r in info.trials if r.tied_with_best and r.trial != chosen.trial]
        others = f"tied with it ('=' in the table): {_listed(tied)}; either will do" if tied else \
            "every other trial ranks behind it"
        return f"How sure: the CSV does not keep how sure the sweep was; {others}."
    if decision is None:
        return "How sure: not raced (one repeat each); rerun with --repeats 3 or more and --resume to see the spread."
    tol = f"{decision.tolerance:.0%}"
    if not decision.decided:
        expected = f" ({decision.expected:.1%} expected)" if decision.expected is not None else ""
        equal = f"; {_equal_words(decision)}" if decision.equal else ""
        return (f"Not sure: {_named(decision.undecided)} might still be up to {decision.gap:.0%} faster{expected}"
                f"{_spread_words(decision.spread)}{equal}; to settle it, {_settle(decision)}.")
    ties = decision.ties
    if ties:
        named = ", ".join(f"{t.other} ({t.measured_ratio:.2f}x measured, {t.predicted_ratio:.2f}x predicted)"
                          for t in ties[:NAMED_SHORT])
        spread = f"this machine's ±{ties[0].spread:.0%} between processes" if ties[0].spread_source == "processes" \
            else f"the model fit's ±{ties[0].spread:.0%} spread"
        return f"Sure: {named} ran as fast, as the model predicts, within {spread}; this is the cheapest of them."
    if decision.equal:
        return f"Sure: {_equal_words(decision)}; every other config is slower."
    if best is not None and best.trial != chosen.trial and best.throughput and chosen.throughput:
        return (f"Sure: every other config is shown at most {tol} faster; {best.trial} measured "
                f"{best.throughput / chosen.throughput - 1:.0%} ahead, within that, and this one is cheaper.")
    return (f"Sure: every other config is slower, or at most {tol} faster and dearer; a rerun here picks this one "
            f"again{_spread_words(decision.spread)}.")


def detail_lines(info: Summary) -> list[str]:
    """What --verbose adds before the answer: the notes, the baseline, why the pick is sure or
    not in full, each bottleneck, the advice measured, the data check, the model, the scale."""
    lines = [f"Note: {note}" for note in info.notes]
    best, chosen, base = info.best, info.recommended, info.baseline
    if base and base.wait_ratio is not None:
        lines.append(f"Baseline: {base.throughput:.1f} samples/s, wait ratio {base.wait_ratio:.3f}")
    decision = info.decision
    if chosen is not None and best and best.trial != chosen.trial:
        within = f"{decision.tolerance:.0%}" if decision is not None else "the tolerance"
        lines.append(f"{best.trial} measured fastest; the recommendation is within {within} of it (shown, or "
                     "expected to cost at most that) and is the cheapest such trial (fewest workers).")
    lines.extend(_tie_lines(decision.ties if decision is not None else ()))
    if decision is not None and not decision.decided:
        named = "; ".join(decision.undecided[:NAMED_UNDECIDED])
        more = len(decision.undecided) - NAMED_UNDECIDED
        if more > 0:
            named += f" and {more} more (see the table)"
        lines.append(f"Not decided: {decision.why} while {named} could still be up to "
                     f"{decision.gap:.0%} faster than the pick; to settle it, {_settle(decision)}.")
    for record in (base, chosen) if base is None or chosen is None or base.trial != chosen.trial else (base,):
        if record is not None and record.verdict:
            label = "baseline" if record is base else "recommended"
            lines.append(f"Bottleneck ({label}, {record.trial}): {record.verdict}. {record.advice or ''}".rstrip())
    for measured in info.advice_measured:
        if measured["data_check"] in DATA_FLAGGED:
            lines.append(f"Advice measured: the verdict on {measured['asked_by']} asked for {measured['trial']}, "
                         f"which fed other samples (data_check {measured['data_check']}): no gain to count.")
        elif measured["gain"] is None:
            lines.append(f"Advice measured: the verdict on {measured['asked_by']} asked for {measured['trial']}, "
                         f"which did not run ({measured['status']}).")
        else:
            lines.append(f"Advice measured: the verdict on {measured['asked_by']} asked for {measured['trial']}: "
                         f"{measured['throughput']:.1f} samples/s, {measured['gain']:.2f}x what it was advised on.")
    lines.extend(info.data.lines() if info.data is not None else [])
    lines.extend(_model_lines(info.model))
    lines.extend(_travel_lines(info) if not info.travel else [])
    scaled = f" ({info.scaled})" if info.scaled else ""
    lines.append(f"Measured at scale x{info.scale:g}{scaled}. The bottleneck moves with data, ranks and "
                 "machine: rerun with --scale, or on the target machine, and check with loadtune compare.")
    return lines


def _tie_lines(ties: Sequence[ModelTie]) -> list[str]:
    """One sentence on the contenders the model and the data tied with the pick, with the figures."""
    if not ties:
        return []
    named = ", ".join(f"{t.other} (predicted {t.predicted_ratio:.2f}x the pick, measured {t.measured_ratio:.2f}x)"
                      for t in ties[:NAMED_UNDECIDED])
    more = f" and {len(ties) - NAMED_UNDECIDED} more" if len(ties) > NAMED_UNDECIDED else ""
    spread = "this machine's spread between processes" if ties[0].spread_source == "processes" else \
        "the spread of the model's fit"
    return [f"Tied with the pick: {named}{more}: the model explains them as equal and the measurements agree "
            f"within {spread} (±{ties[0].spread:.0%}), so the cheapest is picked and none was raced further."]


def _model_lines(report: ModelReport | None) -> list[str]:
    """One line on the pipeline model, worded as every command words it (findings.ModelError: how
    well it predicted the trials before they ran; ModelFellBack where the sweep measured as ofat)."""
    if report is None:
        return []
    if report.fell_back:
        return [f"Model: {ModelFellBack()}."]
    return [str(ModelError(report.error, report.checked))]


def _ranks_lines(info: Summary, chosen: Record) -> list[str]:
    """With ranks: where the winner stands against a one-rank sweep of the same config."""
    if info.ranks <= 1:
        return []
    one = info.one_rank
    if one is None or one.trial is None:
        how = "launch one process, without torchrun," if info.torchrun else "run the same command without --ranks"
        if info.out_given:
            where = " and with another --out"
        else:
            where = f" (it writes {one.csv})" if one is not None else ""
        return [f"With {info.ranks} ranks, throughput is summed over the ranks. To see how the winner moves, "
                f"{how}{where} and compare the two CSVs with loadtune compare."]
    moved = "the winner moved" if one.trial != chosen.trial else "the winner holds"
    return [f"With 1 rank ({one.csv}): {one.trial}, {one.throughput:.1f} samples/s; with {info.ranks} ranks: "
            f"{chosen.trial}, {chosen.throughput:.1f} samples/s in all: {moved}. Tune at the rank count "
            f"you train with."]


LEGEND = (
    "rank: 1 = best by throughput; '=' marks trials as good as the best (shown within the tolerance, default "
    "3%, or costing at most half of it on average); 'ref' is the ideal (the step fed from memory), not a "
    "setting; '-' with (duplicates) or (different): the trial delivered other samples than the baseline "
    "(data_check), so it is not ranked.",
    "samples/s, wait ratio: the training run's, each epoch start weighed by the run's epoch (in files before "
    "format 4, the windows' own); [95%]: where a rerun of the sweep on this machine lands, 95% of the time.",
    "predicted: the pipeline model's throughput for the trial, made before it ran.",
    "wait ratio: share of the loop spent waiting for data and copying it to the device; "
    "speedup: throughput / baseline; % of ideal: throughput / the ideal's.",
    "wait / p95 ms: mean and 95th percentile wait per counted batch; 1st batch s: worker start-up; "
    "epoch start ms: mean wait at each new epoch (persistent_workers lowers it).",
)


def noise_warnings(records: Sequence[Record]) -> list[Finding]:
    """The unstable-result warnings of the contenders that ran (not the ideal, a reference, nor
    the trials racing stopped early, which are clearly behind whatever their spread, nor those
    the data check flagged, which are not contenders); beyond NAMED_UNSTABLE of them, one line."""
    unstable = []
    for r in records:
        interval = r.throughput_interval
        if r.status == Status.OK and record_contends(r) and not r.stopped_early \
                and interval is not None and interval.mean:
            note = unstable_note(r.trial or "", interval)
            if note:
                unstable.append(note)
    if len(unstable) <= NAMED_UNSTABLE:
        return list(unstable)
    spreads = [u.spread for u in unstable]
    return [ManyUnstable(len(unstable), min(spreads), max(spreads), tuple(u.trial for u in unstable[:NAMED_UNSTABLE]))]


def finding_lines(records: Sequence[Record], every_trial: bool = False) -> list[str]:
    """What `loadtune report` says under a file's table, before the answer (file_summary): the
    baseline's bottleneck where it is not the recommendation (whose bottleneck the answer gives;
    every trial's with `every_trial`), what the data check found, how well the model predicted
    the trials before they ran, and the scale measured at."""
    from loadtune.results.choice import recommended

    chosen = recommended(records)
    ran = [r for r in records if r.status == Status.OK and r.trial != IDEAL and r.verdict]
    # The recommendation's own is in the answer (summary_lines: "Bottleneck now").
    shown = ran if every_trial else [r for r in ran if r.trial == BASELINE and r is not chosen]
    lines = []
    for r in shown:
        label = "recommended, " if r is chosen else ""
        lines.append(f"Bottleneck ({label}{r.trial}): {r.verdict}; {r.advice or ''}".rstrip("; "))
    checks: dict[str, int] = {}
    for r in records:
        if r.status == Status.OK and r.trial != IDEAL:
            checks[r.data_check or "not checked"] = checks.get(r.data_check or "not checked", 0) + 1
    if checks:
        lines.append("Data check: " + ", ".join(f"{n} {what}" for what, n in checks.items()))
    error, checked = prediction_error(records)
    if error is not None:
        lines.append(str(ModelError(error, checked)))
    first = next((r for r in records if r.scale is not None), None)
    if first is not None:
        lines.append(f"Measured at scale x{first.scale:g}: the bottleneck moves with data, ranks and machine; "
                     "rerun with --scale, or on the target machine (loadtune predict says what to expect there).")
    return lines


def repeat_lines(csv_path: Path, records: Sequence[Record]) -> list[str]:
    """Each trial's repeats as measured (samples/s, each repeat a process of its own), from the
    raw samples beside the CSV; nothing where there are none (a file from before they were kept)."""
    from loadtune.results.samples import read_samples, repeat_throughputs, samples_file

    stored = read_samples(samples_file(csv_path))
    if stored is None:
        return []
    lines = []
    for r in records:
        kept = stored.trials.get(r.trial or "")
        if kept is None or not r.ran or r.watched or len(kept.measurements) != r.repeats:
            continue
        figures = ", ".join(f"{t:.1f}" for t in repeat_throughputs(kept, r.run_epoch_batches))
        lines.append(f"  {r.trial}: {figures}")
    return [f"Each repeat's samples/s ({samples_file(csv_path).name}):", *lines] if lines else []


def report_title(records: Sequence[Record], source: str) -> str:
    first = records[0] if records else Record()
    parts = [str(v) for v in (first.config_name, first.host, first.device) if v]
    if first.scale is not None:
        parts.append(f"scale x{first.scale:g}")
    if (first.ranks or 1) > 1:
        parts.append(f"{first.ranks} ranks")
    return f"{source}: " + ", ".join(parts) if parts else source
