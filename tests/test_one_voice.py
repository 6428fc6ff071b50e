"""Output a person or a script cannot misread: prose wrapped at the width without splitting a
word, `report` ending with the sweep's answer, exit codes that say what happened, no result
overwritten unasked, `--version`, flags shown as flags, `--json` on every command that prints a
result. In process (typer's CliRunner) on made-up or fixture CSVs: nothing here depends on a
timing or on this machine's cores, but for one real sweep in which every trial fails."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from loadtune import cli
from loadtune.cli import app
from loadtune.core.kinds import EndedBy, Status
from loadtune.core.text import HANGING_INDENT, wrap
from loadtune.core.version import __version__
from loadtune.decide.decision import Decision, Resolving
from loadtune.present.summary import file_summary, summarize_sweep, summary_lines
from loadtune.present.summary_parts import DataFindings, Flagged
from loadtune.present.sweep import SweepResult
from loadtune.record.record import Record, ResultsFile, load_records
from loadtune.record.settings import dataloader_line
from tests.conftest import tiny_config
from tests.test_model import TRUTH, made_up
from tests.test_watched_readers import ranked_sweep, watched, write

FIXTURES = Path(__file__).parent / "fixtures"
REPORT_CSV = FIXTURES / "report" / "demo-vm-x1.csv"
COMPARE = FIXTURES / "compare"
WIDE = 1000  # nothing wraps
TABLE_START, TABLE_END = "<<table>>", "<</table>>"


# --- helpers -----------------------------------------------------------------------------------


def items(text: str) -> list[str]:
    """The output's items, each on one line again: a line indented HANGING_INDENT further in than
    the item above it continues that item (text.wrap); runs of spaces made one."""
    out: list[tuple[int, str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        lead = len(line) - len(line.lstrip())
        if out and lead >= out[-1][0] + HANGING_INDENT:
            out[-1] = (out[-1][0], f"{out[-1][1]} {line.strip()}")
        else:
            out.append((lead, " ".join(line.split())))
    return [" " * lead + text for lead, text in out]


def invoke(args: list, columns: int) -> typer.testing.Result:
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": str(columns)})


def prose(text: str) -> tuple[list[str], list[str]]:
    """The output's lines outside the tables the command printed, and the tables' lines."""
    lines, tables, inside = [], [], False
    for line in text.splitlines():
        if line == TABLE_START:
            inside = True
        elif line == TABLE_END:
            inside = False
        elif line.strip():
            (tables if inside else lines).append(line)
    return lines, tables


@pytest.fixture
def marked_tables(monkeypatch):
    """Each table the CLI prints between two marker lines, so the prose around it can be told apart."""
    original = cli._table

    def marked(console, table):
        console.print(TABLE_START, markup=False, highlight=False, soft_wrap=True)
        original(console, table)
        console.print(TABLE_END, markup=False, highlight=False, soft_wrap=True)

    monkeypatch.setattr(cli, "_table", marked)


LONG = ("this warning runs on well past any terminal's width, so that it has to be wrapped at spaces into "
        "several lines, each continuing the one above it, with a path /a/very/long/path/that/is/longer/than/"
        "eighty/columns/on/its/own/and/stands/alone/on/its/line/results/demo-images-x1.csv in it")


def sweep_result(out: Path, records: list[Record] | None = None) -> SweepResult:
    """A finished sweep made of the report fixture's rows, with an undecided pick, long warnings and
    notes, a data check finding: every kind of line the sweep prints."""
    rows = records if records is not None else [r.with_columns(verdict="data-bound: cpu", advice=LONG)
                                                if r.trial == "num_workers=2" else r for r in load_records(REPORT_CSV)]
    chosen = next((r for r in rows if r.assessment.tied_with_best), None)
    decision = Decision(decided=False, tolerance=0.03, pick=chosen.trial if chosen else None,
                        undecided=("num_workers=3", "num_workers=3, prefetch_factor=4, persistent_workers=true"),
                        gap=0.08, why="the budget ran out", expected=0.012, ended_by=EndedBy.BUDGET,
                        resolving=Resolving(0.05, 3, 0.067),
                        equal=("prefetch_factor=4", "persistent_workers=true", "num_workers=0"))
    summary = summarize_sweep(
        rows, chosen, {"batch_size": 32, "num_workers": 2, "prefetch_factor": 2, "shuffle": True},
        {"batch_size": 32, "num_workers": 1, "prefetch_factor": 2, "shuffle": True}, output=str(out),
        config="demo-images", scale=1.0, scaled="dataset.kwargs.num_images = 1000", device="cpu", ranks=1,
        rank_by="throughput", strategy="model", warnings=(LONG,), notes=(LONG,), decision=decision,
        data=DataFindings((Flagged("num_workers=5", "duplicates", LONG, (LONG,)),)), speedup_lo=1.31,
        speedup_hi=1.72)
    return SweepResult(out, tuple(rows), summary)


@pytest.fixture
def fake_sweep(monkeypatch, tmp_path):
    """`loadtune sweep` through the CLI, its measuring replaced: the progress events and the
    result of sweep_result (or of the records set in `rows`), its rows written to the CSV."""
    from loadtune.asked.trials import Trial
    from loadtune.sweep_process import events, pipeline

    state: dict = {"rows": None, "ran": 0}

    refuse_existing = pipeline.refuse_existing  # the pipeline's own refusal, before anything runs

    def run_sweep(options, *, spec, on_event, **_):
        refuse_existing(options, options.out_path(spec))
        state["ran"] += 1
        out = options.out_path(spec)
        result = sweep_result(out, state["rows"])
        on_event(events.SweepStarted("model", "cpu", 1000, out, resumed=0))
        for r in result.records:
            on_event(events.TrialFinished(Trial(r.trial or "", "x", None, ()), r))
        on_event(events.Notice(LONG))
        on_event(events.SweepFinished(result.records))
        ResultsFile(out).start(result.records)
        return result

    monkeypatch.setattr(pipeline, "run_sweep", run_sweep)
    config = tmp_path / "tiny.yaml"
    config.write_text(json.dumps(tiny_config()))
    state["config"] = config
    return state


@pytest.fixture
def files(tmp_path):
    """A sweep with the model's columns, a watched run, the two together."""
    sweep = write(tmp_path / "sweep.csv", ranked_sweep())
    run = write(tmp_path / "run.csv", [watched(made_up(TRUTH, 0), reason="the script raised ValueError")])
    return {"sweep": sweep, "run": run}


# --- 1: prose wraps at the width, never inside a word ------------------------------------------------


def test_wrap_breaks_at_spaces_with_a_hanging_indent():
    text = "Recommended: num_workers=2, prefetch_factor=1: 401.5 samples/s, 1.67x the baseline's 239.7"
    lines = wrap(text, 40)
    assert lines == ["Recommended: num_workers=2,", "    prefetch_factor=1: 401.5 samples/s,",
                     "    1.67x the baseline's 239.7"]
    assert all(len(line) <= 40 for line in lines)
    assert " ".join(" ".join(lines).split()) == text
    assert wrap("  failed: a: " + "x" * 50 + " end", 30) == ["  failed: a:", "      " + "x" * 50, "      end"]
    assert wrap("short", 80) == ["short"] and wrap("", 80) == [""]
    assert wrap("a very long line", None) == ["a very long line"]


def _commands(tmp_path: Path, files: dict, fake_sweep: dict) -> dict[str, list]:
    return {
        "sweep": ["sweep", fake_sweep["config"], "--out", tmp_path / "s.csv", "--overwrite"],
        "sweep -v": ["sweep", fake_sweep["config"], "--out", tmp_path / "s.csv", "--overwrite", "--verbose"],
        "report": ["report", REPORT_CSV, "--verbose"],
        "report run": ["report", files["run"], files["sweep"]],
        "compare": ["compare", COMPARE / "base.csv", COMPARE / "flipped.csv", COMPARE / "failed.csv"],
        "compare run": ["compare", files["sweep"], files["run"]],
        "predict": ["predict", files["sweep"], "--cores", "1"],
        "predict run": ["predict", files["run"]],
    }


@pytest.mark.parametrize("columns", [80, 100])
def test_no_prose_line_runs_past_the_width_and_no_word_is_split(tmp_path, files, fake_sweep, marked_tables,
                                                                 columns, monkeypatch):
    from loadtune import progress

    monkeypatch.setattr(progress, "CLOCK", lambda: 0.0)  # the same wall time at every width
    for name, args in _commands(tmp_path, files, fake_sweep).items():
        narrow, wide = invoke(args, columns), invoke(args, WIDE)
        assert narrow.exit_code == 0 and wide.exit_code == 0, (name, narrow.output, wide.output)
        for stream in ("stdout", "stderr"):
            lines, _ = prose(getattr(narrow, stream))
            too_long = [line for line in lines if len(line) > columns and len(line.split()) > 1]
            assert not too_long, (name, stream, too_long)
            # Each item, put on one line again, is what the command says at any width: no word split.
            assert items("\n".join(lines)) == items("\n".join(prose(getattr(wide, stream))[0])), (name, stream)
            assert not [line for line in prose(getattr(wide, stream))[0] if len(line) > WIDE]
    assert fake_sweep["ran"] == 4


def test_the_tables_fit_where_their_essential_columns_do(tmp_path, files, fake_sweep, marked_tables):
    """Tables are never cut: they leave columns out to fit, and only where even the essential ones
    do not fit (three files side by side) do their rows run past the width."""
    for name, args in _commands(tmp_path, files, fake_sweep).items():
        for stream in ("stdout", "stderr"):
            _, tables = prose(getattr(invoke(args, 80), stream))
            widest = max((len(line.rstrip()) for line in tables), default=0)
            assert (widest > 80) == (name == "compare" and stream == "stdout"), (name, stream, widest)
            if name == "compare" and stream == "stdout":
                assert " [" in "\n".join(tables) and "…" not in "\n".join(tables), "every figure whole"


def test_the_width_is_columns_else_100_when_not_a_terminal(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)

    class Pipe:
        def isatty(self) -> bool:
            return False

    assert cli._width(Pipe()) == 100
    monkeypatch.setenv("COLUMNS", "72")
    assert cli._width(Pipe()) == 72


# --- 2: report ends with the sweep's answer --------------------------------------------------------


def test_report_ends_with_the_answer_of_the_sweep():
    rows = load_records(REPORT_CSV)
    done = invoke(["report", REPORT_CSV], 80)
    assert done.exit_code == 0, done.output
    said = items(done.stdout)
    rebuilt = json.loads(invoke(["report", REPORT_CSV, "--json"], 80).stdout)["files"][0]["summary"]
    answer = rebuilt["summary"]
    assert said[-len(answer):] == answer
    assert answer[0].startswith("Recommended: workers=2: 325.2 samples/s, 1.53x the baseline;")
    assert answer[1].startswith("How sure: ") and "marked =1" in answer[1]
    assert answer[2].startswith("Paste: DataLoader(dataset, batch_size=32, num_workers=2, prefetch_factor=2)")
    # The same code as the sweep's: its Recommended line for the same rows, without the interval
    # only the sweep's raw draws give.
    chosen = next(r for r in rows if r.trial == "num_workers=2")
    swept = summarize_sweep(rows, chosen, {"batch_size": 32, "num_workers": 2, "prefetch_factor": 2}, None,
                            output=str(REPORT_CSV), config="demo-images", scale=1.0, scaled=None, device="cpu",
                            ranks=1, rank_by="throughput", strategy="model", warnings=())
    assert answer[0] == summary_lines(swept)[0]
    assert rebuilt["decided"] is None and rebuilt["rebuilt"] is True
    assert rebuilt["recommended"]["trial"] == "num_workers=2"


def test_report_pastes_the_sweeps_line_from_the_loader_settings_beside_the_csv(tmp_path):
    from loadtune.record.watched import LoaderInfo, write_loader_info

    csv = tmp_path / REPORT_CSV.name
    csv.write_text(REPORT_CSV.read_text())
    swept = {"batch_size": 32, "num_workers": 2, "prefetch_factor": 2, "shuffle": True, "drop_last": True}
    write_loader_info(csv, {"num_workers=2": LoaderInfo(loader_kwargs=swept),
                            "baseline": LoaderInfo(loader_kwargs={**swept, "num_workers": 1})})
    answer = json.loads(invoke(["report", csv, "--json"], 80).stdout)["files"][0]["summary"]
    paste = next(line for line in answer["summary"] if line.startswith("Paste: "))
    assert paste == f"Paste: {dataloader_line(dict(sorted(swept.items())))}"  # as the sweep's trial holds them
    assert "drop_last=True" in paste and "shuffle=True" in paste
    assert answer["change"] == {"num_workers": 2}
    assert items(invoke(["report", csv], 80).stdout)[-len(answer["summary"]):] == answer["summary"]


def test_a_rebuilt_summary_names_what_the_file_does_not_hold(files):
    rows = load_records(files["sweep"])
    info = file_summary(rows, str(files["sweep"]))
    assert info is not None and info.standing.recommended is not None and info.rebuilt
    lines = summary_lines(info)
    assert lines[0].startswith(f"Recommended: {info.standing.recommended.trial}: ")
    assert lines[1].startswith("How sure: ") and "not how sure the sweep was" in lines[1]
    assert "keep the loader's other keywords as they are" in lines[2]
    assert file_summary(load_records(files["run"]), str(files["run"])) is None


# --- 3: exit codes say what happened ---------------------------------------------------------------


def _failed(rows: list[Record]) -> list[Record]:
    return [r.with_columns(status=Status.FAILED if r.trial != "ideal" else r.status, rank=None,
                                tied_with_best=False, reason=r.reason or f"ValueError: bad sample in {r.trial}")
            if r.status == Status.OK else r for r in rows]


def test_a_sweep_in_which_no_trial_ran_is_an_error_naming_the_first_failure(tmp_path, fake_sweep):
    rows = load_records(REPORT_CSV)
    fake_sweep["rows"] = _failed(rows)
    out = tmp_path / "f.csv"
    done = invoke(["sweep", fake_sweep["config"], "--out", out], 80)
    assert done.exit_code == 1, done.output
    error = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(error) == 1 and done.stderr.rstrip().splitlines()[-1] == error[0]
    assert error[0].startswith("Error: no trial ran successfully; the first, baseline, failed: "
                               "ValueError: bad sample in baseline")
    assert str(out) in error[0] and done.stdout == ""
    assert len(load_records(out)) == len(rows), "the rows stay in the CSV"


def test_failed_trials_are_listed_as_failed_and_only_those_not_run_as_not_run(tmp_path, fake_sweep):
    quiet = items(invoke(["sweep", fake_sweep["config"], "--out", tmp_path / "a.csv"], WIDE).stdout)
    assert "  failed: num_workers=8: RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed. " \
           "(ran out of shared memory)" in quiet
    assert "  timeout: prefetch_factor=16: no result after 120 s (timeout_s)" in quiet
    assert not [line for line in quiet if line.startswith("  not run:")], "skipped trials only with --verbose"
    verbose = items(invoke(["sweep", fake_sweep["config"], "--out", tmp_path / "b.csv", "-v"], WIDE).stdout)
    assert any(line.startswith("  not run: pin_memory=true: no accelerator") for line in verbose)
    assert not [line for line in verbose if "not run: num_workers=8" in line]
    report = items(invoke(["report", REPORT_CSV], WIDE).stdout)
    assert any(line.startswith("  failed: num_workers=8: ") for line in report)
    assert any(line.startswith("  not run: pin_memory=true: ") for line in report)


# --- 4: no result overwritten unasked ----------------------------------------------------------------


def test_sweep_refuses_an_existing_output_unless_resume_or_overwrite(tmp_path, fake_sweep):
    out = tmp_path / "kept.csv"
    out.write_text("what an earlier sweep wrote\n")
    refused = invoke(["sweep", fake_sweep["config"], "--out", out], 80)
    assert refused.exit_code == 1 and fake_sweep["ran"] == 0
    assert refused.stderr.count("\n") == 1, "one line"
    assert refused.stderr.startswith(f"Error: {out} already exists: add --resume ")
    assert "--overwrite" in refused.stderr
    assert out.read_text() == "what an earlier sweep wrote\n"
    both = invoke(["sweep", fake_sweep["config"], "--out", out, "--resume", "--overwrite"], 80)
    assert both.exit_code == 2 and fake_sweep["ran"] == 0
    assert invoke(["sweep", fake_sweep["config"], "--out", out, "--overwrite"], 80).exit_code == 0
    assert fake_sweep["ran"] == 1 and len(load_records(out)) > 1


@pytest.mark.parametrize("command", ["compare", "predict"])
def test_compare_and_predict_refuse_to_replace_their_out_csv_unasked(tmp_path, files, command):
    args = [command, files["sweep"], *([files["run"]] if command == "compare" else [])]
    out = tmp_path / "written.csv"
    assert invoke([*args, "--out", out], 80).exit_code == 0
    first = out.read_text()
    out.write_text("mine\n")
    refused = invoke([*args, "--out", out], 80)
    assert refused.exit_code == 1 and refused.stderr.startswith(f"Error: {out} already exists: add --overwrite")
    assert out.read_text() == "mine\n"
    assert invoke([*args, "--out", out, "--overwrite"], 80).exit_code == 0
    assert out.read_text() == first


# --- 5, 6: --version; flags shown as flags ----------------------------------------------------------


def test_version_prints_the_version_and_exits_0():
    done = invoke(["--version"], 80)
    assert done.exit_code == 0 and done.stdout == f"loadtune {__version__}\n"


def test_every_boolean_option_is_shown_as_a_flag_in_help():
    group = typer.main.get_command(app)
    helps = {"": invoke(["--help"], 100).stdout}
    for name in group.commands:
        helps[name] = invoke([name, "--help"], 100).stdout
    for name, text in helps.items():
        assert text and "<bool>" not in text, name
    for name, command in group.commands.items():
        for param in command.params:
            if getattr(param, "is_flag", False):
                for opt in param.opts:
                    shown = re.search(rf"(?m)^\s+(?:-\w, )?{re.escape(opt)}\b(.*)$", helps[name])
                    assert shown, (name, opt)
                    assert not shown.group(1).lstrip().startswith("<"), (name, opt, shown.group(0))
    # A flag takes no value: what follows it is the next argument, so `--verbose true` names a file.
    done = invoke(["report", REPORT_CSV, "--verbose", "true"], 80)
    assert done.exit_code == 1 and "true: results CSV not found" in done.stderr


# --- 7: --json on every command that prints a result ------------------------------------------------


def test_report_json_on_stdout_the_rest_on_stderr(files):
    done = invoke(["report", REPORT_CSV, files["run"], "--json"], 80)
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert set(data) == {"files", "plot"} and [f["file"] for f in data["files"]] == [str(REPORT_CSV), str(files["run"])]
    sweep, run = data["files"]
    assert set(sweep) == {"file", "summary", "watched"} and sweep["watched"] == []
    assert {"recommended", "baseline", "dataloader", "summary", "trials", "decided", "rebuilt"} <= set(sweep["summary"])
    assert run["summary"] is None and run["watched"][0]["status"] == "watched"
    assert {"trial", "throughput", "wait_ratio", "dist_rank", "reason"} <= set(run["watched"][0])
    assert "Recommended:" in done.stderr and done.stdout.startswith("{")


def test_compare_json_on_stdout_the_rest_on_stderr(tmp_path):
    done = invoke(["compare", COMPARE / "base.csv", COMPARE / "flipped.csv", "--json", "--out",
                   tmp_path / "a.csv"], 80)
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert set(data) == {"files", "reference", "winners", "differences", "tau", "flags", "changed", "verdict",
                         "transfers", "runs", "rows", "summary", "out"}
    assert data["changed"] is True and data["verdict"].startswith("conclusion changed")
    assert data["winners"] == {"base": "num_workers=2", "flipped": "num_workers=4"}
    assert data["summary"][-1] == data["verdict"] and data["out"] == str(tmp_path / "a.csv")
    assert {row["trial"] for row in data["rows"]} >= {"baseline", "num_workers=2"}
    assert "conclusion changed" in done.stderr and done.stdout.startswith("{")
    flip = invoke(["compare", COMPARE / "base.csv", COMPARE / "flipped.csv", "--json", "--fail-on-flip"], 80)
    assert flip.exit_code == 3 and json.loads(flip.stdout)["changed"] is True
