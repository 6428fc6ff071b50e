"""`loadtune report NAME.csv` ends with the answer the sweep printed, how sure included: the sweep
keeps what its CSV does not hold (racing's decision, its pick, the speedup's interval) beside it
in NAME.decision.json, tied to that CSV by its digest. A file without it (older sweeps), or whose
CSV changed since, reports as before: the trials tied with the pick stand for how sure. Whole
sweeps of fake trials through the CLI: the files and the words are what is tested."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest
import yaml

from loadtune.core.kinds import EndedBy
from loadtune.decide.decision import (
    Decision,
    ModelTie,
    Resolving,
    StoredDecision,
    decision_file,
    read_decision,
    write_decision,
)
from loadtune.present.summary import file_summary, summary_lines
from loadtune.record.measurement import CpuWindow
from loadtune.record.record import ResultsFile, load_records, read_records
from loadtune.record.watched import loader_file
from tests.conftest import fake_setup
from tests.test_one_voice import WIDE, invoke, items
from tests.test_resume import CONFIG, SameMeasurements

REBUILT = "(the CSV keeps which are equal, not how sure the sweep was)."
# What racing decided, as the sweep's --json and the report's --json both give it.
DECIDED = ("decided", "tolerance", "zone", "gain_bound", "undecided", "at_most_lost", "expected_lost", "equal",
           "ties", "paired", "speedup_interval", "recommended", "dataloader", "change", "summary")


class WithCpu(SameMeasurements):
    """SameMeasurements with the CPU each window used, so that each trial gets a verdict (the
    answer's "Bottleneck now:" line): the main process busy without workers, the workers with."""

    def __call__(self, job, timeout_s):  # type: ignore[no-untyped-def]
        outcome = super().__call__(job, timeout_s)
        measured = outcome.result
        window = measured.windows[0]
        wall = sum(window.wait_s) + sum(window.h2d_s) + sum(window.step_s)
        workers = job.trial.loader_kwargs.get("num_workers", 0)
        cpu = CpuWindow(wall, 0.3 * wall if workers else 0.95 * wall, 0.9 * wall * workers)
        windows = (dataclasses.replace(window, cpu=cpu),)
        return dataclasses.replace(outcome, result=dataclasses.replace(measured, windows=windows))


@pytest.fixture
def swept(monkeypatch, tmp_path):
    """`loadtune sweep` through the CLI, its trials fake (WithCpu) and preflight and the machine
    standing in (fake_setup): the pipeline, conclude and the files it writes are the real ones.
    Returns a function of the config's measure block and the CSV: the sweep's result (CliRunner)."""
    from loadtune.sweep_process import pipeline

    real = pipeline.run_sweep

    def run_sweep(options, *, spec, on_event, **_):  # type: ignore[no-untyped-def]
        setup = fake_setup(spec, {"config_sha": spec.sha, "scale": spec.scale, "ranks": 1, "started_at": "then"},
                           dataset_len=400)
        return real(options, spec=spec, on_event=on_event, setup=setup, execute=WithCpu(), shm_free_mb=None)

    monkeypatch.setattr(pipeline, "run_sweep", run_sweep)

    def sweep(measure: dict, out: Path, *flags: str):  # type: ignore[no-untyped-def]
        config = tmp_path / "config.yaml"
        config.write_text(yaml.safe_dump({**CONFIG, "measure": {**CONFIG["measure"], **measure}}, sort_keys=False))
        done = invoke(["sweep", config, "--out", out, *flags], WIDE)
        assert done.exit_code == 0, done.output
        return done

    return sweep


def printed_answer(stdout: str) -> list[str]:
    """The answer a sweep printed: from its "Recommended:" line to the files it wrote."""
    said = items(stdout)
    start = next(i for i, line in enumerate(said) if line.startswith("Recommended: "))
    end = next(i for i, line in enumerate(said) if line.startswith("Files: "))
    return said[start:end]


def report(csv: Path) -> tuple[list[str], dict]:
    """What `loadtune report` prints of the CSV, and its --json summary."""
    done = invoke(["report", csv], WIDE)
    assert done.exit_code == 0, done.output
    rebuilt = invoke(["report", csv, "--json"], WIDE)
    assert rebuilt.exit_code == 0, rebuilt.output
    return items(done.stdout), json.loads(rebuilt.stdout)["files"][0]["summary"]


# --- the report ends with the sweep's answer -------------------------------------------------------


@pytest.mark.parametrize("measure, sure", [({"repeats": 4}, "Sure: "),
                                           ({"repeats": 1, "min_repeats": 1}, "Not sure: ")])
def test_report_ends_with_the_answer_the_sweep_printed_how_sure_included(swept, tmp_path, measure, sure):
    out = tmp_path / "s.csv"
    answer = printed_answer(swept(measure, out).stdout)
    assert [line.split(":")[0] for line in answer] == ["Recommended", sure.rstrip(": "), "Paste", "Bottleneck now"]
    assert decision_file(out).exists() and not any(p.name.startswith(".") for p in tmp_path.iterdir())
    said, rebuilt = report(out)
    assert said[-len(answer):] == answer
    assert rebuilt["summary"] == answer and rebuilt["rebuilt"] is True
    # --json: what racing decided, as the sweep's own --json gave it.
    as_json = json.loads(swept(measure, tmp_path / "j.csv", "--json").stdout)
    assert as_json["summary"] == answer
    assert {k: rebuilt[k] for k in DECIDED} == {k: as_json[k] for k in DECIDED}
    assert rebuilt["decided"] is (sure == "Sure: ") and rebuilt["zone"] is not None


def test_an_older_file_without_the_stored_decision_still_reports_how_sure_from_the_csv(swept, tmp_path):
    out = tmp_path / "s.csv"
    answer = printed_answer(swept({"repeats": 4}, out).stdout)
    decision_file(out).unlink()  # as every sweep before NAME.decision.json left its files
    said, rebuilt = report(out)
    assert said[-len(rebuilt["summary"]):] == rebuilt["summary"]
    recommended, how_sure, paste, bottleneck = rebuilt["summary"]
    assert how_sure.startswith("How sure: ") and how_sure.endswith(REBUILT)
    assert paste == answer[2] and bottleneck == answer[3]
    assert recommended == re.sub(r" \[[0-9.]+x, [0-9.]+x\]", "", answer[0]) != answer[0]  # no interval: no draws
    assert rebuilt["decided"] is None and rebuilt["zone"] is None and rebuilt["speedup_interval"] is None


def test_a_csv_changed_since_the_sweep_wrote_it_is_reported_without_the_sweeps_decision(swept, tmp_path):
    """Edited by hand, or rewritten by a resumed run that did not finish: the stored decision is
    another file's, so it is left out."""
    out = tmp_path / "s.csv"
    swept({"repeats": 4}, out)
    rows = read_records(out)
    ResultsFile(out).start([r for r in rows if r.trial != "num_workers=0"])
    assert read_decision(out) is None
    said, rebuilt = report(out)
    assert said[-3].startswith("How sure: ") and said[-3].endswith(REBUILT)
    assert rebuilt["decided"] is None


def test_the_stored_decision_holds_across_line_ends_and_is_ignored_when_unreadable(swept, tmp_path):
    out = tmp_path / "s.csv"
    answer = printed_answer(swept({"repeats": 4}, out).stdout)
    text = out.read_bytes()
    out.write_bytes(text.replace(b"\r\n", b"\n") if b"\r\n" in text else text.replace(b"\n", b"\r\n"))
    assert report(out)[0][-len(answer):] == answer
    decision_file(out).write_text("{not json")
    said, rebuilt = report(out)
    assert said[-3].startswith("How sure: ") and rebuilt["decided"] is None


def test_a_stored_pick_no_longer_tied_with_the_best_is_not_the_files_answer(swept, tmp_path):
    out = tmp_path / "s.csv"
    swept({"repeats": 4}, out)
    stored = read_decision(out)
    rows = load_records(out)
    assert stored is not None and stored.decision is not None and stored.row(rows) is not None
    behind = next(r.trial for r in rows if r.ran and not r.assessment.tied_with_best)
    other = dataclasses.replace(stored, recommended=behind)
    info = file_summary(rows, str(out), stored=other)
    assert info is not None and info.decision is None and info.pick.speedup_lo is None
    assert summary_lines(info)[1].endswith(REBUILT)
    kept = file_summary(rows, str(out), stored=stored)
    assert kept is not None and kept.decision == stored.decision
    assert (kept.pick.speedup_lo, kept.pick.speedup_hi) == stored.speedup


# --- the file ------------------------------------------------------------------------------------------


def test_a_decision_reads_back_equal_every_part_of_it(tmp_path):
    tie = ModelTie("a", "b", 1.01, 0.99, 0.04, "processes")
    decisions = [
        Decision(True, 0.03, "a", gap=0.05, expected=0.001, ties=(tie,), equal=("b", "c"),
                 resolving=Resolving(0.05, 4, 0.063, 0.02)),
        Decision(False, 0.03, "a", ("b", "c, d"), math.inf, "the time budget (--budget) ran out", None,
                 ended_by=EndedBy.BUDGET, resolving=Resolving()),
    ]
    for decision in decisions:
        assert Decision.from_json(json.loads(json.dumps(decision.to_json()))) == decision
    csv = tmp_path / "s.csv"
    csv.write_text("rank,trial\n1,a\n")
    written = write_decision(csv, decisions[0], None, (1.2, 1.5))
    assert written == tmp_path / "s.decision.json" and loader_file(csv) != written
    assert read_decision(csv) == StoredDecision(decisions[0], None, 1.2, 1.5)
    assert json.loads(written.read_text())["decision"]["resolving"]["zone"] == 0.063
    write_decision(csv, None, None)
    assert read_decision(csv) == StoredDecision(None, None)
    assert read_decision(tmp_path / "none.csv") is None
