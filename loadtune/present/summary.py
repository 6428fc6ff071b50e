"""What a sweep concluded, as one typed value (Summary, made of the parts in summary_parts), the
short answer and the details it is worded as (answer), and --json. Built by the sweep
(conclude) or rebuilt from a CSV (file_summary)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from loadtune.asked.trials import BASELINE, IDEAL
from loadtune.core.kinds import RankBy, Status
from loadtune.decide.choice import recommended, record_contends
from loadtune.decide.decision import Decision, StoredDecision
from loadtune.model.predict_values import Travel
from loadtune.present import answer
from loadtune.present.summary_parts import DataFindings, Elsewhere, Findings, Flagged, Labels, OnRanks, Pick, Standing
from loadtune.record.findings import Finding, ManyUnstable
from loadtune.record.interval import unstable_note
from loadtune.record.record import MEASURED_STATUSES, Record, rank_file
from loadtune.record.settings import recorded_settings

# Unstable trials warned about one by one; the rest are counted (the table lists them all).
NAMED_UNSTABLE = 3

BRIEF = ("trial", "rank", "status", "throughput", "throughput_lo", "throughput_hi", "wait_ratio",
         "wait_ratio_lo", "wait_ratio_hi", "speedup", "tied_with_best", "num_workers", "prefetch_factor",
         "persistent_workers", "pin_memory", "batch_size", "pct_of_ideal", "verdict", "advice", "data_check")


def brief(record: Record | None) -> dict[str, Any] | None:
    """A record's headline figures and settings, as --json gives them."""
    return None if record is None else {k: record.column(k) for k in BRIEF}


@dataclass(frozen=True)
class Summary:
    """What a sweep concluded: what was swept (labels), the rows that answer it (standing), the
    config to paste (pick), how sure (decision), the findings, the ranks, where the pick moves,
    the chart drawn, and whether it was rebuilt from the CSV (`loadtune report`) rather than
    concluded by the sweep: the file holds no racing decision, no raw draws for the speedup's
    interval and only the swept settings."""

    labels: Labels
    standing: Standing
    pick: Pick = Pick()
    decision: Decision | None = None
    found: Findings = Findings()
    on_ranks: OnRanks = OnRanks()
    elsewhere: Elsewhere = Elsewhere()
    plot: str | None = None
    rebuilt: bool = False

    @property
    def decided(self) -> bool | None:
        return self.decision.decided if self.decision is not None else None

    @property
    def equal_records(self) -> list[Record]:
        """The trials as good as the pick within this machine's noise (either will do)."""
        return self.standing.named(self.decision.equal if self.decision is not None else ())

    def to_json(self) -> dict[str, Any]:
        labels, standing, decision, found = self.labels, self.standing, self.decision, self.found
        data: dict[str, Any] = {
            "output": labels.output, "config": labels.config, "scale": labels.scale, "scaled": labels.scaled,
            "device": labels.device, "ranks": self.on_ranks.ranks, "rank_by": labels.rank_by,
            "strategy": labels.strategy,
            "warnings": [str(w) for w in (*found.warnings, *found.notes)], "baseline": brief(standing.baseline),
            "ideal_throughput": standing.ideal_throughput, "best": brief(standing.best),
            "recommended": brief(standing.recommended), "dataloader": self.pick.dataloader,
            "decided": self.decided,
            "tolerance": decision.tolerance if decision is not None else None,
            "zone": decision.zone if decision is not None else None,
            "gain_bound": decision.resolving.bound if decision is not None else None,
            "undecided": list(decision.undecided) if decision is not None else [],
            "at_most_lost": decision.gap if decision is not None else None,
            "expected_lost": decision.expected if decision is not None else None,
            "equal": [brief(r) for r in self.equal_records],
            "advice_measured": standing.advice_measured,
            "source": labels.source,
            "loader_kwargs": self.pick.loader_kwargs,
            "change": self.pick.change,
            "trials": [{**(brief(r) or {}), "reason": r.reason or None} for r in standing.trials],
            "data_check": found.data.to_json() if found.data is not None else None,
            "model": found.model.to_json() if found.model is not None else None,
            "ties": [dataclasses.asdict(t) for t in (decision.ties if decision is not None else ())],
            "paired": [j.to_json() for j in (decision.paired if decision is not None else ())],
            "travel": [dataclasses.asdict(t) for t in self.elsewhere.moved],
            "travel_same": list(self.elsewhere.same),
            "notes": [str(n) for n in found.notes],
            "speedup_interval": [self.pick.speedup_lo, self.pick.speedup_hi]
            if self.pick.speedup_lo is not None else None,
            "summary": summary_lines(self),
            "rebuilt": self.rebuilt,
        }
        if self.on_ranks.ranks > 1:
            one = self.on_ranks.one_rank
            data.update(per_rank_csv=self.on_ranks.per_rank_csv, out_given=self.on_ranks.out_given,
                        torchrun=self.on_ranks.torchrun,
                        one_rank=dataclasses.asdict(one) if one is not None and one.trial else None,
                        one_rank_csv=one.csv if one is not None else None)
        if self.plot is not None:
            data["plot"] = self.plot
        return data


def summary_lines(info: Summary) -> list[str]:
    """The answer, in at most seven lines at 100 columns (the CLI adds the files written): what to
    set and what it gains, how sure that is, what to paste, what limits it now, and, where they
    apply, the trials the data check kept out and the ranks. Everything else (the remedy for the
    bottleneck, where the pick moves on another machine) is in detail_lines (--verbose) and
    `loadtune report`."""
    chosen, data = info.standing.recommended, info.found.data
    if chosen is None:
        if data is not None and data.flagged:
            return ["No trial can be recommended: the data check flagged every trial that ran.", *data.lines()[:1]]
        if info.rebuilt:
            return ["No trial ran successfully: the lines under the table give each trial's reason."]
        return ["No trial ran successfully: see the reason column of the CSV (loadtune report shows it)."]
    pick = info.pick
    lines = [answer.recommended_line(info.standing, pick, info.decision) + answer.behaviour_changed(pick.change),
             answer.sure_line(info.standing, info.decision, info.rebuilt), _paste_line(info)]
    bottleneck = answer.bottleneck_line(chosen)
    lines.extend([bottleneck] if bottleneck else [])
    if data is not None and data.flagged:
        lines.append(data.short_line())
    lines.extend(answer.ranks_lines(info.on_ranks, chosen))
    return lines


def _paste_line(info: Summary) -> str:
    """What to paste, or what to change where the factory builds the loader's parts."""
    source, change = info.labels.source, info.pick.change
    if source != "dataset" and change is not None:
        what = ", ".join(f"{k}={v!r}" for k, v in change.items()) or "nothing: the baseline is the pick"
        return f"Change in the {source} your factory {info.labels.factory} builds: {what}; keep the rest as it is."
    if info.pick.swept_only:
        return (f"Paste: {info.pick.dataloader}; keep the loader's other keywords as they are (the CSV holds "
                "only the swept settings)")
    return f"Paste: {info.pick.dataloader}"


def detail_lines(info: Summary) -> list[str]:
    """What --verbose adds before the answer: the notes, the baseline, why the pick is sure or
    not in full, each bottleneck, the advice measured, the data check, the model, the scale."""
    lines = [f"Note: {note}" for note in info.found.notes]
    best, chosen, base = info.standing.best, info.standing.recommended, info.standing.baseline
    if base and base.wait_ratio is not None:
        lines.append(f"Baseline: {base.throughput:.1f} samples/s, wait ratio {base.wait_ratio:.3f}")
    decision = info.decision
    if chosen is not None and best and best.trial != chosen.trial:
        within = answer.share(decision.zone) if decision is not None else "the tolerance"
        lines.append(f"{best.trial} measured fastest; the recommendation is within {within} of it (shown, or "
                     "expected to cost at most half that) and is the cheapest such trial (the baseline, then "
                     "fewest workers).")
    lines.extend(answer.tie_lines(decision.ties if decision is not None else ()))
    lines.extend(answer.paired_lines(decision.paired, decision.zone) if decision is not None else [])
    if decision is not None and not decision.decided:
        lines.append(answer.undecided_line(decision))
    lines.extend(answer.bottleneck_lines(info.standing))
    lines.extend(answer.advice_lines(info.standing))
    lines.extend(info.found.data.lines() if info.found.data is not None else [])
    lines.extend(answer.model_lines(info.found.model))
    lines.extend(answer.travel_lines(info.elsewhere, info.labels.output))
    scaled = f" ({info.labels.scaled})" if info.labels.scaled else ""
    lines.append(f"Measured at scale x{info.labels.scale:g}{scaled}. The bottleneck moves with data, ranks and "
                 "machine: rerun with --scale, or on the target machine, and check with loadtune compare.")
    return lines


def summarize_sweep(records: Sequence[Record], chosen: Record | None, loader_kwargs: Mapping[str, Any] | None,
                    baseline_kwargs: Mapping[str, Any] | None = None, *, labels: Labels | None = None,
                    output: str = "", config: str = "", scale: float = 1.0, scaled: str | None = None,
                    device: str = "", ranks: int = 1, rank_by: str = str(RankBy.THROUGHPUT), strategy: str = "",
                    warnings: tuple[Finding | str, ...] = (), notes: tuple[Finding | str, ...] = (),
                    decision: Decision | None = None, data: DataFindings | None = None,
                    speedup_lo: float | None = None, speedup_hi: float | None = None,
                    plot: str | None = None) -> Summary:
    """The summary of ranked rows, told field by field (where a test or a caller has them as
    loose figures): `loader_kwargs` are the chosen trial's full settings, `baseline_kwargs` the
    baseline's (what to change in the user's own code is the difference)."""
    pick = Pick.of(loader_kwargs, baseline_kwargs, (speedup_lo, speedup_hi))
    return Summary(labels or Labels(output, config, scale, scaled, device, rank_by, strategy),
                   Standing.of(records, chosen),
                   pick if chosen is not None else dataclasses.replace(pick, dataloader=None), decision,
                   Findings(warnings, notes, data), OnRanks(ranks), plot=plot)


def file_summary(records: Sequence[Record], output: str, travel: Sequence[Travel] = (),
                 travel_same: Sequence[str] = (), loaders: Mapping[str, Mapping[str, Any]] | None = None,
                 stored: StoredDecision | None = None) -> Summary | None:
    """A sweep's summary rebuilt from its CSV's rows, for `loadtune report` to end with the answer
    the sweep printed (summary_lines). `stored`: what the sweep concluded beside the CSV
    (NAME.decision.json: how sure racing was, its pick, the speedup's interval), used where its
    pick is still among the file's trials tied with the best; without it, the trials tied with
    the pick stand for how sure, and the speedup has no interval. What the factory returned is
    left out. `loaders`: each trial's loader settings by name (NAME.loader.json beside the CSV),
    for the paste line the sweep printed; without the pick's, the paste line holds the swept
    settings and says so. `travel`, `travel_same`: where the pick moves on the common targets
    (predict.travel). None when the file holds no sweep's rows (a watched run's only)."""
    rows = [r for r in records if not r.watched]
    if not rows:
        return None
    picked = stored.row(rows) if stored is not None else None
    concluded = stored if stored is not None and picked is not None else StoredDecision(None, None)
    chosen = picked or recommended(rows)
    base = next((r for r in rows if r.trial == BASELINE), None)
    first = rows[0]
    path = Path(output)
    per_rank = rank_file(path) if (first.measuring.ranks or 1) > 1 else None
    flagged = tuple(Flagged(r.trial or "", r.measuring.data_check or "",
                            r.reason or f"data_check {r.measuring.data_check}")
                    for r in rows if r.status == Status.OK and r.data_flagged)
    loaders = loaders or {}

    def settings(record: Record | None) -> dict[str, Any] | None:
        return None if record is None else dict(loaders.get(record.trial or "") or recorded_settings(record))

    swept_only = chosen is not None and not loaders.get(chosen.trial or "")
    scale = first.run.scale if first.run.scale is not None else 1.0
    labels = Labels(output, first.run.config_name or path.stem, scale, None,
                    first.run.machine.device or "", _ranked_by(rows), first.run.strategy or "")
    return Summary(labels, Standing.of(rows, chosen),
                   Pick.of(settings(chosen), settings(base) if base is not None and base.ran else None,
                           concluded.speedup, swept_only=swept_only), concluded.decision,
                   found=Findings((), tuple(noise_warnings(rows)), DataFindings(flagged) if flagged else None),
                   on_ranks=OnRanks(first.measuring.ranks or 1, per_rank_csv=str(per_rank) if per_rank is not None
                                    and per_rank.exists() else None),
                   elsewhere=Elsewhere(tuple(travel), tuple(travel_same)), rebuilt=True)


def _ranked_by(records: Sequence[Record]) -> str:
    """What the rows were ranked by, as their order shows: throughput unless only the wait ratio
    agrees with the ranks."""
    ranked = sorted((r for r in records if r.rank is not None and r.throughput is not None
                     and r.wait_ratio is not None), key=lambda r: r.rank or 0)
    pairs = [(a, b) for a, b in zip(ranked, ranked[1:]) if (a.rank or 0) < (b.rank or 0)]
    by_throughput = all((a.throughput or 0) >= (b.throughput or 0) for a, b in pairs)
    by_wait = all((a.wait_ratio or 0) <= (b.wait_ratio or 0) for a, b in pairs)
    return str(RankBy.WAIT_RATIO) if by_wait and not by_throughput else str(RankBy.THROUGHPUT)


def noise_warnings(records: Sequence[Record]) -> list[Finding]:
    """The unstable-result warnings of the contenders that ran (choice.contends: not the ideal, a
    reference, nor those the data check flagged), but the trials racing stopped early, which are
    clearly behind whatever their spread; beyond NAMED_UNSTABLE of them, one line."""
    unstable = []
    for r in records:
        interval = r.throughput_interval
        if r.status == Status.OK and record_contends(r) and not r.measuring.stopped_early \
                and interval is not None and interval.mean:
            note = unstable_note(r.trial or "", interval, r.measuring.repeats or 1)
            if note:
                unstable.append(note)
    if len(unstable) <= NAMED_UNSTABLE:
        return list(unstable)
    spreads = [u.spread for u in unstable]
    return [ManyUnstable(len(unstable), min(spreads), max(spreads), tuple(u.trial for u in unstable[:NAMED_UNSTABLE]),
                         max(u.repeats for u in unstable))]


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
