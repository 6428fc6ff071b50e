"""The sweep's answer in words, sentence by sentence: what to set and what it gains, how sure
that is and the one rerun that would settle it, where the pick moves, the ranks, the ties, the
model. Each sentence is made from the summary's parts (summary_parts) and its decision."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from loadtune.asked.trials import cost_of
from loadtune.core.kinds import EndedBy
from loadtune.decide.decision import Decision, ModelTie
from loadtune.decide.paired import Judged, PairedOutcome
from loadtune.decide.selection import PICK_SHORTFALL_SHARE
from loadtune.model.model import ModelReport
from loadtune.present.report import short_trial
from loadtune.present.summary_parts import Elsewhere, OnRanks, Pick, Standing
from loadtune.record.findings import ModelError, ModelFellBack
from loadtune.record.record import DATA_FLAGGED, Record

# What was seen beside the verdict is shown in the short answer when it is at most this long.
BOTTLENECK_SEEN = 80
# Undecided contenders named in the details; the rest are counted (the table lists them all).
NAMED_UNDECIDED = 3

# Settings whose change alters what the training run does, not only how fast it is fed: a pick
# that changes one says so.
BEHAVIOUR = {"in_order": "batches may come out of order", "drop_last": "the last incomplete batch is dropped or kept",
             "shuffle": "the order of samples changes", "batch_size": "the model trains on batches of another size",
             "sampler": "other samples are drawn", "batch_sampler": "other batches are drawn"}


def settle(decision: Decision) -> str:
    """The one rerun that would settle an undecided pick, the same in the short answer and the
    details: what ended the racing decides it (decision.ended: a kept contender first, then the
    budget, then the repeats). Each measures what is undecided again: --overwrite measures anew
    the contenders kept without their raw samples (racing cannot add a repeat to a figure as
    recorded); --resume keeps every repeat measured (its raw samples) and races the pick and its
    rivals further, up to more repeats than any trial holds (measure.repeats capped them all)."""
    if decision.ended_by == EndedBy.KEPT:
        return "rerun with --overwrite (a trial kept without its raw samples cannot be raced)"
    if decision.ended_by == EndedBy.BUDGET:
        return "rerun with a larger --budget and --resume"
    repeats = decision.resolving.repeats
    if repeats < 1:  # not recorded: no number is known to be above what the contenders hold
        return "rerun with more --repeats than measure.repeats and --resume"
    return f"rerun with --repeats {max(2 * repeats, 5)} --resume"


def behaviour_changed(change: Mapping[str, Any] | None) -> str:
    """The settings of a change that alter the training run's behaviour, as one clause ('' when none)."""
    named = [f"{key}={value!r} ({BEHAVIOUR[key]})" for key, value in (change or {}).items() if key in BEHAVIOUR]
    return f" It changes behaviour: {'; '.join(named)}." if named else ""


def recommended_line(standing: Standing, pick: Pick, decision: Decision | None) -> str:
    """What to set and what it gains over the baseline."""
    chosen, base = standing.recommended, standing.baseline
    assert chosen is not None and chosen.throughput is not None  # the recommendation ran
    figures = f"{chosen.throughput:.1f} samples/s"
    if base is not None and chosen.trial == base.trial:
        tol = share(decision.zone) if decision is not None else "the tolerance"
        return f"Recommended: keep the baseline ({figures}, wait ratio {chosen.wait_ratio:.3f}): no change is " \
               f"shown more than {tol} faster."
    if base is None or base.throughput is None or not base.ran or base.data_flagged:
        why = " (the baseline fed other samples: no speedup to give)" if base is not None and base.data_flagged \
            else ""
        return f"Recommended: {chosen.trial}: {figures}, wait ratio {chosen.wait_ratio:.3f}{why}."
    interval = f" [{pick.speedup_lo:.2f}x, {pick.speedup_hi:.2f}x]" if pick.speedup_lo is not None else ""
    return (f"Recommended: {short_trial(chosen.trial or '')}: {figures}, {chosen.throughput / base.throughput:.2f}x "
            f"the baseline{interval}; wait ratio {base.wait_ratio:.3f} -> {chosen.wait_ratio:.3f}.")


def bottleneck_line(chosen: Record) -> str | None:
    """What limits the pick now, in one line: its verdict and what was seen (the remedy is in the
    details and `loadtune report`)."""
    judged = chosen.assessment
    if not judged.verdict:
        return None
    seen = (judged.advice or "").partition(": ")[0]
    return f"Bottleneck now: {judged.verdict}" + (f"; {seen}" if seen and len(seen) <= BOTTLENECK_SEEN else "") + "."


def share(fraction: float) -> str:
    """A share as a percentage: whole where it is whole to a tenth (3%), else to a tenth (5.4%)."""
    tenths = round(fraction * 1000)
    return f"{tenths // 10}%" if tenths % 10 == 0 else f"{tenths / 10:.1f}%"


def _zone_words(decision: Decision) -> str:
    """The zone the pick was judged at, and why that wide: the tolerance, or what this machine
    resolves in the sweep's repeats at its spread between processes."""
    resolving = decision.resolving
    if decision.zone > decision.tolerance and resolving.spread is not None:
        return (f"the {share(decision.zone)} this machine resolves (±{resolving.spread:.0%} between processes, "
                f"{resolving.repeats} repeats)")
    return f"the {decision.tolerance:.0%} tolerance"


def _named(names: Sequence[str]) -> str:
    """The first name, quoted (names hold commas of their own), and how many more."""
    more = len(names) - 1
    return f"'{short_trial(names[0])}'" + (f" (and {more} more)" if more > 0 else "") if names else "another config"


def _counted(names: Sequence[str]) -> str:
    """How many other configs, pointing at the table's marks rather than joining names that hold
    commas of their own."""
    return f"{len(names)} other config{'s' if len(names) != 1 else ''} marked =1"


def sure_line(standing: Standing, decision: Decision | None, rebuilt: bool) -> str:
    """One plain sentence on how sure the pick is, at most two lines at 100 columns."""
    chosen = standing.recommended
    assert chosen is not None
    if decision is None and rebuilt:
        tied = [r.trial or "" for r in standing.trials if r.assessment.tied_with_best and r.trial != chosen.trial]
        verb = "is" if len(tied) == 1 else "are"
        others = f"{_counted(tied)} {verb} as good; either will do" if tied else "every other trial ranks behind it"
        return f"How sure: {others} (the CSV keeps which are equal, not how sure the sweep was)."
    if decision is None:
        return "How sure: not raced (one repeat each); rerun with --repeats 3 or more and --resume to see the spread."
    if not decision.decided and not decision.undecided:
        return (f"Not sure: one process per config does not show how much processes differ; to settle it, "
                f"{settle(decision)}.")
    if not decision.decided:
        return (f"Not sure: {_named(decision.undecided)} might still be up to {decision.gap:.0%} faster, beyond "
                f"the {share(decision.zone)} this machine resolves; to settle it, {settle(decision)}.")
    equal = [r for r in standing.trials if r.trial in decision.equal]
    return _sure_words(decision, all(cost_of(chosen.to_dict()) <= cost_of(r.to_dict()) for r in equal))


def _sure_words(decision: Decision, cheapest: bool) -> str:
    """Why a decided pick is sure: nothing left can gain more than the zone, the model's ties, the
    configs equal within the zone, or the rest behind. Of the equal (their estimates within the
    zone), the pick is the cheapest, or where a cheaper one is expected to lose more than
    PICK_SHORTFALL_SHARE of the zone to the fastest (selection.acceptable), the cheapest that is not."""
    bound = decision.resolving.bound
    if bound is not None and bound <= decision.zone:
        marked = f"the {len(decision.equal) + 1} marked =1"
        equal = "" if not decision.equal else f"; it is the cheapest of {marked}" if cheapest else f"; {marked}"
        return (f"Sure: nothing can run more than {share(bound)} faster (its wait ratio bounds it), inside "
                f"{_zone_words(decision)}{equal}.")
    if decision.ties:
        tie = decision.ties[0]
        return (f"Sure: {tie.other} ({tie.measured_ratio:.2f}x measured, {tie.predicted_ratio:.2f}x predicted) ran "
                "as fast, as the model predicts; this is the cheapest of them.")
    if decision.equal:
        which = "this is the cheapest of them" if cheapest else "of them, this is the cheapest expected to lose " \
            f"under {share(decision.zone * PICK_SHORTFALL_SHARE)} to the fastest"
        return f"Sure: {_counted(decision.equal)} ran within {_zone_words(decision)}; {which}."
    return f"Sure: every other config is slower, or dearer and faster by at most {_zone_words(decision)}."


def undecided_line(decision: Decision) -> str:
    """The details of an undecided pick: what ended the racing, the contenders, the rerun."""
    named = "; ".join(decision.undecided[:NAMED_UNDECIDED])
    more = len(decision.undecided) - NAMED_UNDECIDED
    if more > 0:
        named += f" and {more} more (see the table)"
    return (f"Not decided: {decision.why} while {named} could still be up to "
            f"{decision.gap:.0%} faster than the pick; to settle it, {settle(decision)}.")


def advice_lines(standing: Standing) -> list[str]:
    """Each trial a verdict's advice asked for, against the trial it was advised on."""
    lines = []
    for measured in standing.advice_measured:
        if measured["data_check"] in DATA_FLAGGED:
            what = f", which fed other samples (data_check {measured['data_check']}): no gain to count."
        elif measured["gain"] is None:
            what = f", which did not run ({measured['status']})."
        else:
            what = f": {measured['throughput']:.1f} samples/s, {measured['gain']:.2f}x what it was advised on."
        lines.append(f"Advice measured: the verdict on {measured['asked_by']} asked for {measured['trial']}{what}")
    return lines


def bottleneck_lines(standing: Standing) -> list[str]:
    """The baseline's bottleneck and the recommendation's, where they differ."""
    base, chosen = standing.baseline, standing.recommended
    lines = []
    for record in (base, chosen) if base is None or chosen is None or base.trial != chosen.trial else (base,):
        if record is not None and record.assessment.verdict:
            label = "baseline" if record is base else "recommended"
            judged = record.assessment
            lines.append(f"Bottleneck ({label}, {record.trial}): {judged.verdict}. {judged.advice or ''}".rstrip())
    return lines


def tie_lines(ties: Sequence[ModelTie]) -> list[str]:
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


def paired_lines(paired: Sequence[Judged], zone: float) -> list[str]:
    """One sentence per close call measured in adjacent processes: the ratio, its 90% interval and
    what it showed at the zone."""
    lines = []
    for judged in paired[:NAMED_UNDECIDED]:
        first, second, pairs = judged.call.first, judged.call.second, len(judged.call.log_ratios)
        shown = {PairedOutcome.EQUAL: f"equal within the {share(zone)} zone",
                 PairedOutcome.FIRST_AHEAD: f"{first} ahead by more than the {share(zone)} zone",
                 PairedOutcome.SECOND_AHEAD: f"{second} ahead by more than the {share(zone)} zone",
                 PairedOutcome.UNDECIDED: f"not settled at the {share(zone)} zone"}[judged.outcome]
        lines.append(f"Head to head: {second} ran {judged.ratio:.2f}x {first} (90% interval {judged.low:.2f}-"
                     f"{judged.high:.2f}) over {pairs} pair{'s' if pairs != 1 else ''} of adjacent processes in "
                     f"alternating order: {shown}.")
    return lines


def model_lines(report: ModelReport | None) -> list[str]:
    """One line on the pipeline model, worded as every command words it (findings.ModelError: how
    well it predicted the trials before they ran; ModelFellBack where the sweep measured as ofat)."""
    if report is None:
        return []
    if report.fell_back:
        return [f"Model: {ModelFellBack()}."]
    return [str(ModelError(report.error, report.checked))]


def travel_lines(elsewhere: Elsewhere, output: str) -> list[str]:
    """One line per common target where the model predicts another pick; else one saying it holds."""
    if elsewhere.moved:
        moved = "; ".join(f"with {t.label}, {t.config} (this pick would run {t.share:.2f} of it)"
                          for t in elsewhere.moved)
        return [f"Elsewhere the pick moves (predicted): {moved}. For the machine you will train on: "
                f"loadtune predict {output} --cores N --ranks R --step-ms S"]
    if elsewhere.same:
        same = elsewhere.same
        listed = f"{', '.join(same[:-1])} or {same[-1]}" if len(same) > 1 else same[0]
        return [f"The pick holds (predicted) with {listed}."]
    return []


def ranks_lines(on_ranks: OnRanks, chosen: Record) -> list[str]:
    """With ranks: where the winner stands against a one-rank sweep of the same config."""
    if on_ranks.ranks <= 1:
        return []
    one = on_ranks.one_rank
    if one is None or one.trial is None:
        how = "launch one process, without torchrun," if on_ranks.torchrun else "run the same command without --ranks"
        if on_ranks.out_given:
            where = " and with another --out"
        else:
            where = f" (it writes {one.csv})" if one is not None else ""
        return [f"With {on_ranks.ranks} ranks, throughput is summed over the ranks. To see how the winner moves, "
                f"{how}{where} and compare the two CSVs with loadtune compare."]
    moved = "the winner moved" if one.trial != chosen.trial else "the winner holds"
    return [f"With 1 rank ({one.csv}): {one.trial}, {one.throughput:.1f} samples/s; with {on_ranks.ranks} ranks: "
            f"{chosen.trial}, {chosen.throughput:.1f} samples/s in all: {moved}. Tune at the rank count "
            f"you train with."]
