"""The short answer a sweep ends with, the table that never cuts a figure, and advice checked
against the trials that measured it: made-up records, exact text."""

from __future__ import annotations

import dataclasses
import io
import re

import pytest
from rich.console import Console

from loadtune.core.text import wrap
from loadtune.decide.advice import Advised, checked_advice, weigh, with_checked_advice
from loadtune.decide.decision import Resolving
from loadtune.present.report import results_table, short_trial
from loadtune.present.summary import Summary, detail_lines, summarize_sweep, summary_lines
from loadtune.present.summary_parts import DataFindings, Flagged
from loadtune.present.sweep import Decision, ModelTie
from loadtune.record.findings import BusyMachine, ManyUnstable
from loadtune.record.record import Record

PICK = "num_workers=2, prefetch_factor=4"
PERSISTENT = f"{PICK}, persistent_workers=true"
START_UP_ADVICE = ("62% of the wait is at epoch starts (420 ms each): set persistent_workers=True so the 2 workers "
                   "are not started again every epoch, or use longer epochs.")


def row(trial: str, throughput: float, rank: int | None = None, spread: float = 0.1, **more) -> Record:
    values = dict(trial=trial, status="ok", throughput=throughput, throughput_lo=throughput * (1 - spread),
                  throughput_hi=throughput * (1 + spread), wait_ratio=0.5, wait_ratio_lo=0.45, wait_ratio_hi=0.55,
                  rank=rank, tied_with_best=rank == 1, num_workers=0, batch_size=32, repeats=3)
    values.update(more)
    return Record.of(**values)


def records() -> list[Record]:
    return [
        row(PICK, 385.0, 1, speedup=385 / 150, pct_of_ideal=40.0, num_workers=2, prefetch_factor=4,
            verdict="data-bound: start-up", advice=START_UP_ADVICE),
        row("num_workers=2", 370.0, 2, num_workers=2),
        row(PERSISTENT, 282.0, 3, num_workers=2, prefetch_factor=4, persistent_workers=True),
        row("persistent_workers=true", 140.0, 4, num_workers=1, persistent_workers=True),
        row("baseline", 150.0, 5, speedup=1.0, num_workers=1, verdict="data-bound: cpu",
            advice="waiting 73% of the time: 99% of each fetch is CPU work and the 2 usable cores are 53% busy: "
                   "add workers up to the cores (num_workers=2); beyond them, only cheaper transforms or more cores "
                   "help."),
        row("ideal", 950.0, None, spread=0.01),
        Record(trial="pin_memory=true", status="skipped", reason="no accelerator"),
    ]


def summary(decision: Decision | None, rows: list[Record] | None = None, **meta) -> Summary:
    rows = rows if rows is not None else records()
    chosen = next(r for r in rows if r.trial == PICK)
    kwargs = {"batch_size": 32, "num_workers": 2, "prefetch_factor": 4}
    values = dict(output="out.csv", config="demo", scale=1.0, scaled=None, device="cpu", ranks=1,
                  rank_by="throughput", strategy="model", warnings=(), decision=decision,
                  notes=("trials with up to 3 workers on 2 usable cores: trust throughput over wait ratio",),
                  speedup_lo=2.1, speedup_hi=3.0)
    values.update(meta)
    return summarize_sweep(rows, chosen, kwargs, {"batch_size": 32, "num_workers": 1}, **values)


UNDECIDED = Decision(False, 0.03, PICK, ("num_workers=2", "num_workers=3", "prefetch_factor=1"), 0.12,
                     "racing ended", 0.028, ended_by="repeats", resolving=Resolving(0.11, 3, 0.148))


def test_the_answer_when_not_decided():
    lines = summary_lines(summary(UNDECIDED))
    assert lines[0] == ("Recommended: workers=2 prefetch=4: 385.0 samples/s, 2.57x the baseline [2.10x, 3.00x]; "
                        "wait ratio 0.500 -> 0.500.")
    assert lines[1] == ("Not sure: 'workers=2' (and 2 more) might still be up to 12% faster, beyond the 14.8% "
                        "this machine resolves; to settle it, rerun with --repeats 6 --resume.")
    assert lines[2] == "Paste: DataLoader(dataset, batch_size=32, num_workers=2, prefetch_factor=4)"
    assert lines[3].startswith("Bottleneck now: data-bound: start-up; 62% of the wait")
    assert len(lines) == 4


@pytest.mark.parametrize("ended_by, settle", [
    ("repeats", "rerun with --repeats 6 --resume"), ("budget", "rerun with a larger --budget and --resume"),
    ("kept", "rerun with --overwrite (a trial kept without its raw samples cannot be raced)")])
def test_the_one_thing_that_settles_it(ended_by, settle):
    from dataclasses import replace

    line = summary_lines(summary(replace(UNDECIDED, ended_by=ended_by)))[1]
    assert line.endswith(f"to settle it, {settle}.")


@pytest.mark.parametrize("ended_by", ["repeats", "budget", "kept"])
def test_the_answer_and_the_details_give_the_same_rerun(ended_by):
    """One rule for the rerun that settles an undecided pick: with --resume and a kept contender
    undecided, the short answer and --verbose name the same one."""
    from dataclasses import replace

    info = summary(replace(UNDECIDED, ended_by=ended_by))
    short = summary_lines(info)[1]
    details = next(line for line in detail_lines(info) if line.startswith("Not decided: "))
    rerun = short[short.index("to settle it, "):]
    assert details.endswith(rerun) and "rerun with" in rerun


def test_the_answer_when_decided_or_tied():
    decided = Decision(True, 0.03, PICK, resolving=Resolving(0.02, 3, 0.03))
    assert summary_lines(summary(decided))[1] == \
        "Sure: every other config is slower, or dearer and faster by at most the 3% tolerance."
    tie = ModelTie(PICK, "num_workers=2", 1.0, 0.96, 0.06, "processes")
    assert summary_lines(summary(Decision(True, 0.03, PICK, ties=(tie,))))[1] == (
        "Sure: num_workers=2 (0.96x measured, 1.00x predicted) ran as fast, as the model predicts; this is the "
        "cheapest of them.")
    assert summary_lines(summary(None))[1].startswith("How sure: not raced")


def test_nothing_left_to_gain_beyond_the_zone_is_said_so():
    bounded = Decision(True, 0.03, PICK, resolving=Resolving(0.05, 3, 0.067, 0.028), equal=(PERSISTENT,))
    assert summary_lines(summary(bounded))[1] == (
        "Sure: nothing can run more than 2.8% faster (its wait ratio bounds it), inside the 6.7% this machine "
        "resolves (±5% between processes, 3 repeats); it is the cheapest of the 2 marked =1.")
    # A cheaper config marked =1 (within the zone by its estimate), not the pick: not called the cheapest.
    cheaper = dataclasses.replace(bounded, equal=("num_workers=2",))
    assert summary_lines(summary(cheaper))[1].endswith("3 repeats); the 2 marked =1.")


def test_configs_equal_within_the_zone_are_counted_as_marked_in_the_table():
    equal = Decision(True, 0.03, PICK, resolving=Resolving(0.06, 3, 0.08), equal=(PERSISTENT, "num_workers=3"))
    assert summary_lines(summary(equal))[1] == (
        "Sure: 2 other configs marked =1 ran within the 8% this machine resolves (±6% between processes, 3 "
        "repeats); this is the cheapest of them.")
    rows = {r.trial for r in summary(equal).standing.trials}
    assert [e["trial"] for e in summary(equal).to_json()["equal"]] == \
        [name for name in (PERSISTENT, "num_workers=3") if name in rows], "each with its row's settings"
    # num_workers=2 is cheaper than the pick (prefetch_factor 2 against 4): the pick is the cheapest of
    # those expected to cost at most half the zone (selection.acceptable), and the line says so.
    cheaper = dataclasses.replace(equal, equal=("num_workers=2", "num_workers=3"))
    line = summary_lines(summary(cheaper))[1]
    assert line.endswith("; of them, this is the cheapest expected to lose under 4% to the fastest.") and \
        len(wrap(line, 100)) <= 2, line


def test_the_details_wait_for_verbose():
    info = summary(UNDECIDED, data=DataFindings((Flagged("num_workers=3", "duplicates", "repeats", ("Split it.",)),),
                                               ("not checked for 1 of 5 trials: no epoch",)))
    short = summary_lines(info)
    assert short[-1] == "Not ranked: num_workers=3 (duplicates: repeats). Split it."
    assert not any("not checked" in line or "Measured at scale" in line or "trust throughput" in line
                   for line in short)
    details = detail_lines(info)
    assert details[0] == "Note: trials with up to 3 workers on 2 usable cores: trust throughput over wait ratio"
    assert any(line.startswith("Data check: not checked for 1 of 5 trials") for line in details)
    assert any(line.startswith("Bottleneck (baseline, baseline): data-bound: cpu") for line in details)
    assert details[-1].startswith("Measured at scale x1.")
    assert info.to_json()["warnings"] == list(info.found.notes)  # --json keeps every warning, as before


def test_advice_measured_and_not_shown_to_help_is_cited_not_advised():
    rows = records()
    advised = {PICK: [Advised("persistent_workers=True", PERSISTENT, "persistent_workers=true")]}
    checked = {r.trial: r for r in with_checked_advice(rows, advised, 0.03)}
    advice = checked[PICK].assessment.advice
    assert advice == ("62% of the wait is at epoch starts (420 ms each): persistent_workers=True "
                                    f"measured 282.0 [253.8, 310.2] samples/s against 385.0 ({PICK}): not shown "
                                    "to help here.")
    assert "set persistent_workers" not in summary_lines(summary(UNDECIDED, list(checked.values())))[3]
    assert checked["baseline"].assessment.advice == rows[4].assessment.advice  # no settings named for it: as it was


def test_advice_falls_back_to_the_change_alone_and_says_when_it_helped_or_is_untested():
    rows = [r for r in records() if r.trial != PERSISTENT]
    by_name = {r.trial: r for r in rows}
    alone = weigh(Advised("persistent_workers=True", PERSISTENT, "persistent_workers=true"), PICK, by_name, 0.03)
    assert (alone.trial, alone.against, alone.helped) == ("persistent_workers=true", "baseline", False)
    helped = weigh(Advised("num_workers=2", "num_workers=2", "num_workers=2"), "baseline", by_name, 0.03)
    assert helped.helped and checked_advice("add workers (num_workers=2).", [helped]) == (
        "add workers (num_workers=2). num_workers=2 measured 370.0 [333.0, 407.0] samples/s against 150.0 "
        "(baseline): 2.47x.")
    predicted = Record.of(trial="x, in_order=false", status="predicted", predicted_throughput=400.0)
    base = Record.of(trial="x", status="ok", throughput=300.0, throughput_lo=290.0, throughput_hi=310.0,
                  predicted_throughput=320.0)
    untested = weigh(Advised("in_order=False", "x, in_order=false", "in_order=false"), "x",
                     {"x": base, "x, in_order=false": predicted}, 0.03)
    assert checked_advice("try in_order=False.", [untested]) == \
        "try in_order=False. in_order=False is untested here (the model predicts 1.25x)."


def test_short_trial_names():
    assert short_trial("num_workers=2, prefetch_factor=4, persistent_workers=true") == \
        "workers=2 prefetch=4 persistent"
    assert short_trial("persistent_workers=false, pin_memory=true") == "no-persistent pinned"
    assert short_trial("baseline") == "baseline"


@pytest.mark.parametrize("width", [80, 100, 160])
def test_the_table_never_cuts_a_figure(width):
    rows = [*records(), row(f"{PICK}, persistent_workers=true, in_order=false, main_threads=1", 123.4, 6,
                            predicted_throughput=130.0, wait_ms=12.5, wait_p95_ms=30.1, step_ms=50.2,
                            first_batch_s=0.31, epoch_start_ms=445.0)]
    console = Console(width=width, file=io.StringIO(), color_system=None)
    console.print(results_table(rows, "demo (scale x1, cpu, model, ranked by throughput)", width=width), crop=False)
    out = console.file.getvalue()
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= width
    for r in rows:
        if r.status == "ok":
            assert f"{r.throughput:.1f} [{r.figures.throughput_lo:.1f}, {r.figures.throughput_hi:.1f}]" in out, r.trial
            if "ratio" in out.split("─")[0]:  # a column left out is left out whole
                lo, hi = r.figures.wait_ratio_lo, r.figures.wait_ratio_hi
                assert f"{r.wait_ratio:.3f} [{lo:.3f}, {hi:.3f}]" in out, r.trial
        # Whole, in one form or the other; at 80 columns the longest short names wrap at spaces.
        assert r.trial in out or short_trial(r.trial) in out or \
            (width == 80 and all(word in out for word in short_trial(r.trial).split())), r.trial
    headers = " ".join(out.split("─")[0].split())
    assert "samples/s [95%]" in headers and "rank" in headers
    if width >= 160:
        console = Console(width=width, file=io.StringIO(), color_system=None)
        console.print(results_table(records(), width=width))
        head = console.file.getvalue().split("─")[0].split()
        assert {"epoch", "p95", "batch", "speedup"} <= set(head)  # every column, headers wrapped
        console = Console(width=200, file=io.StringIO(), color_system=None)
        console.print(results_table(records(), width=200))
        assert PERSISTENT in console.file.getvalue()  # whole names where there is room


def test_the_baseline_picked_or_flagged():
    rows = records()
    base = next(r for r in rows if r.trial == "baseline")
    info = summarize_sweep(rows, base, {"batch_size": 32, "num_workers": 1}, {"batch_size": 32, "num_workers": 1},
                           output="out.csv", config="demo", scale=1.0, scaled=None, device="cpu", ranks=1,
                           rank_by="throughput", strategy="model", warnings=(), decision=Decision(True, 0.03))
    assert summary_lines(info)[0] == ("Recommended: keep the baseline (150.0 samples/s, wait ratio 0.500): no change "
                                      "is shown more than 3% faster.")
    flagged = [r if r.trial != "baseline" else
               Record.of(**{**r.to_dict(), "data_check": "duplicates"}) for r in rows]
    assert summary_lines(summary(UNDECIDED, flagged))[0] == (
        f"Recommended: {PICK}: 385.0 samples/s, wait ratio 0.500 (the baseline fed other samples: no speedup to "
        "give).")


@pytest.mark.parametrize("width", [80, 100, 160])
def test_the_compare_table_never_cuts_a_figure(width, tmp_path):
    from loadtune.comparison.files import compare, load_results
    from loadtune.present.compare_text import comparison_table
    from loadtune.record.record import ResultsFile

    paths = []
    for label, factor in (("here", 1.0), ("there", 1.1), ("third", 0.9)):
        path = tmp_path / f"{label}.csv"
        rows = [Record.of(**{**r.to_dict(), "throughput": r.throughput * factor,
                          "throughput_lo": r.figures.throughput_lo * factor,
                          "throughput_hi": r.figures.throughput_hi * factor,
                          "config_sha": "abc", "config_name": "demo", "scale": 1.0})
                if r.status == "ok" else r for r in records()]
        ResultsFile(path).replace(rows)
        paths.append(path)
    comparison = compare(load_results(paths))
    console = Console(width=width, file=io.StringIO(), color_system=None)
    console.print(comparison_table(comparison, width=width), crop=False)
    out = console.file.getvalue()
    assert "…" not in out
    for line in out.splitlines()[3:]:
        for cell in re.findall(r"\d+\.\d \[[^\]]*\]", line):
            assert re.fullmatch(r"\d+\.\d \[\d+\.\d-\d+\.\d\]", cell), cell  # each interval whole on its line
    assert len(re.findall(r"\d+\.\d \[\d+\.\d-\d+\.\d\]", out)) >= 6 * 3  # every file's figures


def test_report_says_the_bottlenecks_the_data_check_the_model_and_the_scale():
    from loadtune.present.report import finding_lines

    rows = [Record.of(**{**r.to_dict(), "scale": 2.0, "data_check": "same" if r.trial != "num_workers=2" else None,
                      "predicted_throughput": 350.0 if r.trial == PICK else None}) for r in records()]
    lines = finding_lines(rows)
    # The recommendation's bottleneck is the answer's (summary_lines: "Bottleneck now"), not repeated here.
    assert lines[0].startswith("Bottleneck (baseline): data-bound: cpu; waiting 73%")
    assert lines[1] == "Data check: 4 same, 1 not checked"
    # |350/385 - 1|, worded as the sweep's summary and `loadtune predict` word it (findings.ModelError)
    assert lines[2] == "Model: its error on this file is 9% (median |predicted/measured - 1| over 1 trial " \
        "predicted before it ran)."
    assert lines[3].startswith("Measured at scale x2:")
    every = finding_lines(rows, every_trial=True)  # only these two trials have verdicts
    assert every[0].startswith(f"Bottleneck (recommended, {PICK}): data-bound: start-up; 62% of the wait")
    assert every[1:] == lines


def test_each_trial_the_advice_asked_for_is_set_against_the_trial_it_was_advised_on():
    rows = [*records(), row("num_workers=4", 420.0, 2, num_workers=4, asked_by=PICK),
            row("num_workers=5", 400.0, None, num_workers=5, asked_by=PICK, data_check="duplicates"),
            Record.of(trial="num_workers=6", status="failed", reason="boom", asked_by=PICK)]
    details = [line for line in detail_lines(summary(UNDECIDED, rows)) if line.startswith("Advice measured")]
    asked = f"Advice measured: the verdict on {PICK} asked for"
    assert details == [f"{asked} num_workers=4: 420.0 samples/s, 1.09x what it was advised on.",
                       f"{asked} num_workers=5, which fed other samples (data_check duplicates): no gain to count.",
                       f"{asked} num_workers=6, which did not run (failed)."]


@pytest.mark.parametrize("columns, most", [(100, 8), (80, 11)])
def test_the_answer_fits_one_screen(columns, most):
    """The answer, the files line with the wall time included, at most 8 lines at 100 columns (11
    at 80), and how sure it is in at most 2 (3 at 80), whichever way it ends."""
    from pathlib import Path

    from loadtune.core.text import wrap
    from loadtune.present.sweep import SweepResult
    from loadtune.present.view import files_line

    out = Path("results/demo-images.csv")
    decisions = [UNDECIDED, Decision(True, 0.03, PICK, resolving=Resolving(0.05, 3, 0.067, 0.028),
                                     equal=("num_workers=2",)),
                 Decision(True, 0.03, PICK, resolving=Resolving(0.06, 3, 0.08), equal=("num_workers=2",)),
                 Decision(True, 0.03, PICK, resolving=Resolving(0.02, 3, 0.03))]
    for decision in decisions:
        info = summary(decision)
        files = files_line(SweepResult(out, tuple(records()), info), out.with_suffix(".png"), False, 74.0)
        lines = [line for item in [*summary_lines(info), files] for line in wrap(item, columns)]
        assert len(lines) <= most, lines
        assert len(wrap(summary_lines(info)[1], columns)) <= (2 if columns == 100 else 3)


def test_lists_of_trial_names_keep_each_name_whole():
    """Trial names hold ", " themselves: a list of them is joined with "; " so each reads as one."""
    two = ("num_workers=3, persistent_workers=true", "num_workers=2, prefetch_factor=4")
    unstable = ManyUnstable(3, 0.16, 0.22, two).words()
    assert "(first: num_workers=3, persistent_workers=true; num_workers=2, prefetch_factor=4)" in unstable
    busy = BusyMachine(((two[0], 1), (two[1], 2)), 0.25).words()
    assert "num_workers=3, persistent_workers=true (1); num_workers=2, prefetch_factor=4 (2). See" in busy
