"""The one results record: written and read back unchanged, older files still load, and every
reader (resume, report, compare, plot) goes through the same reader with the same errors."""

from __future__ import annotations

import dataclasses
import math
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from loadtune.core.errors import ResultsError
from loadtune.record.record import (
    BOOL,
    COLUMNS,
    FLOAT,
    FORMAT_VERSION,
    INT,
    TEXT,
    RankRecord,
    Record,
    ResultsFile,
    load_records,
    plain_frame,
    read_records,
    to_frame,
)
from tests.conftest import run_cli

V1 = Path(__file__).parent / "fixtures" / "v1"

_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1,
                max_size=30).filter(lambda t: t.strip() == t and t != "")
_VALUES = {
    INT: st.integers(-(2**40), 2**40),
    FLOAT: st.floats(allow_nan=False, allow_infinity=False),
    BOOL: st.booleans(),
    TEXT: _TEXT,
}


def records(kind: type) -> st.SearchStrategy:
    fields = {c.name: st.none() | _VALUES[c.kind] for c in kind.columns() if c.name != "format_version"}
    fields["trial"] = _TEXT
    return st.builds(lambda **values: kind.of(**values, format_version=FORMAT_VERSION), **fields)


@settings(max_examples=60, deadline=None)
@given(st.lists(records(Record), max_size=4))
def test_any_record_written_and_read_back_is_equal(tmp_path_factory, written):
    path = tmp_path_factory.mktemp("rt") / "r.csv"
    results = ResultsFile(path)
    results.start(written[:1])
    for record in written[1:]:
        results.append(record)
    assert read_records(path, required=()) == written


@settings(max_examples=30, deadline=None)
@given(st.lists(records(RankRecord), max_size=3))
def test_any_rank_record_round_trips(tmp_path_factory, written):
    path = tmp_path_factory.mktemp("rt") / "r.ranks.csv"
    ResultsFile(path, RankRecord).start(written)
    assert read_records(path, RankRecord, required=()) == written


def test_the_column_table_keeps_the_contract_order():
    assert COLUMNS[:6] == ("rank", "trial", "changed", "value", "status", "reason")
    assert COLUMNS[-1] == "format_version"
    kinds = {c.name: c.kind for c in Record.columns()}
    assert kinds["tied_with_best"] == BOOL and kinds["config_sha"] == TEXT and kinds["rank"] == INT


def test_rounded_uses_each_columns_digits_and_drops_non_finite():
    r = Record.rounded(trial="t", throughput=123.456789, wait_ratio=0.123456789, wait_ms=math.nan,
                       first_batch_s=math.inf)
    assert (r.throughput, r.wait_ratio, r.figures.wait_ms, r.figures.first_batch_s) == (123.46, 0.1235, None, None)


def test_files_of_the_previous_format_load_in_every_reader(tmp_path):
    records = load_records(V1 / "sweep.csv")
    assert {r.trial for r in records} >= {"baseline", "num_workers=2", "ideal"}
    base = next(r for r in records if r.trial == "baseline")
    assert base.run.format_version == 1, "written before the version column"
    assert base.measuring.ranks == 1 and base.settings.persistent_workers is False
    assert isinstance(base.throughput, float)
    assert base.run.config_sha == "aab4be820f9d"
    ranked = load_records(V1 / "sweep-r2.ranks.csv", RankRecord)
    assert {r.dist_rank for r in ranked} == {0, 1}
    frame = to_frame(records)
    assert str(frame["rank"].dtype) == "Int64" and str(frame["tied_with_best"].dtype) == "boolean"
    assert plain_frame(records)["reason"].tolist().count("") >= 1


@pytest.mark.slow
def test_report_and_compare_read_a_previous_format_file(tmp_path):
    report = run_cli("report", str(V1 / "sweep.csv"), "--plot", str(tmp_path / "c.png"), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert "num_workers=2" in report.stdout and (tmp_path / "c.png").stat().st_size > 0
    compare = run_cli("compare", str(V1 / "sweep.csv"), str(V1 / "sweep-r2.csv"), cwd=tmp_path)
    assert compare.returncode == 0, compare.stderr
    assert "differs: ranks: sweep 1, sweep-r2 2" in compare.stdout


@pytest.mark.slow
def test_resume_measures_the_rows_of_a_previous_format_file_again(tmp_path, marker):
    """A file of format 1 loads, and --resume measures its rows again, saying so: their figures
    weighed epoch starts by the windows, not the run's epochs."""
    shutil.copy(V1 / "v1.yaml", tmp_path / "v1.yaml")
    out = tmp_path / "sweep.csv"
    shutil.copy(V1 / "sweep.csv", out)
    # Rows of another host are never resumed: the fixture's host is renamed to this machine's.
    import socket

    text = out.read_text().replace(",vm,", f",{socket.gethostname()},")
    out.write_text(text)
    before = {r.trial: r for r in read_records(out)}
    done = run_cli("sweep", str(tmp_path / "v1.yaml"), "--out", str(out), "--resume", cwd=tmp_path,
                   marker=marker)
    assert done.returncode == 0, done.stderr
    older = [t for t, r in before.items() if r.status == "ok"]
    assert f"Resuming: {len(older)} rows of that file measured again" in done.stdout + done.stderr
    after = {r.trial: r for r in read_records(out)}
    assert older and all(after[t].measuring.window_throughput is not None
                         for t in older if after[t].ran), "measured now"
    assert all(r.run.format_version == FORMAT_VERSION for r in after.values())


@pytest.mark.parametrize("text, expected", [
    ("throughput,x\nfast,1\n", "missing columns"),
    (None, "not found"),
    ("", "empty"),
])
def test_unreadable_files_are_one_error_naming_the_file(tmp_path, text, expected):
    path = tmp_path / "bad.csv"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ResultsError, match=expected) as info:
        load_records(path)
    assert str(path) in str(info.value)


def _edited(tmp_path: Path, column: str, value: str) -> Path:
    import csv

    rows = list(csv.reader((V1 / "sweep.csv").open()))
    rows[1][rows[0].index(column)] = value
    path = tmp_path / "edited.csv"
    with path.open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    return path


def test_a_value_that_does_not_fit_its_column_names_row_and_column(tmp_path):
    with pytest.raises(ResultsError, match=r"row 2, column throughput: not a number: 'fast'"):
        load_records(_edited(tmp_path, "throughput", "fast"))
    with pytest.raises(ResultsError, match=r"row 2, column rank: not a whole number"):
        load_records(_edited(tmp_path, "rank", "1.5"))
    with pytest.raises(ResultsError, match=r"column tied_with_best: not true or false"):
        load_records(_edited(tmp_path, "tied_with_best", "maybe"))


@pytest.mark.parametrize("text, value", [("yes", True), ("1", True), ("TRUE", True), ("no", False), ("0", False)])
def test_booleans_are_read_alike_everywhere(tmp_path, text, value):
    (record,) = [r for r in load_records(_edited(tmp_path, "tied_with_best", text))][:1]
    assert record.assessment.tied_with_best is value


def test_a_newer_format_is_refused_with_the_remedy(tmp_path):
    path = tmp_path / "new.csv"
    ResultsFile(path).start([Record(trial="a", status="ok")])
    path.write_text(path.read_text().replace(f",{FORMAT_VERSION}\n", f",{FORMAT_VERSION + 1}\n"))
    with pytest.raises(ResultsError, match="newer loadtune"):
        read_records(path, required=())


def test_a_last_line_cut_short_is_left_out(tmp_path):
    path = tmp_path / "cut.csv"
    shutil.copy(V1 / "sweep.csv", path)
    with path.open("a") as f:
        f.write("3,num_workers=9,num_workers,9,ok")
    assert len(read_records(path)) == len(read_records(V1 / "sweep.csv"))


def test_records_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Record(trial="a").rank = 1  # type: ignore[misc]


def test_the_figure_columns_are_defined_once_and_shared_by_both_record_types():
    from loadtune.decide.stats import summarize
    from loadtune.measure.records import stats_columns
    from loadtune.record.columns import FIGURES, Figures
    from loadtune.record.record import Measured
    from tests.test_decide import fake_measurement

    shared = {c.name: c for c in Figures.columns()} if hasattr(Figures, "columns") else None
    assert shared is None, "Figures is a block of columns, not a table"
    for kind in (Record, RankRecord):
        columns = {c.name: (c.kind, c.digits) for c in kind.columns()}
        assert set(FIGURES) <= set(columns)
        assert [n for n in kind.names() if n in FIGURES][:12] == list(FIGURES[:12]), "one block, in order"
    assert [Record.columns()[Record.names().index(n)] for n in FIGURES] == \
        [RankRecord.columns()[RankRecord.names().index(n)] for n in FIGURES], "the same kind and digits"
    assert set(stats_columns(summarize(fake_measurement(100.0, 1)))) == set(FIGURES)
    ran = Record.rounded(trial="a", status="ok", **stats_columns(summarize(fake_measurement(100.0, 1))))
    assert isinstance(ran.measured, Measured) and ran.measured.throughput.mean == ran.throughput
    assert Record(trial="b", status="failed", reason="boom").measured is None
    assert Record.of(trial="c", status="predicted", predicted_throughput=90.0).measured is None


def test_each_column_is_held_once_by_the_record_or_one_of_its_groups():
    from loadtune.record.columns import places

    for kind in (Record, RankRecord):
        assert sorted(places(kind)) == sorted(kind.names()) and len(set(kind.names())) == len(kind.names())
    r = Record.rounded(trial="a", num_workers=2, host="h", throughput=1.234567, verdict="compute-bound")
    assert (r.settings.num_workers, r.run.machine.host, r.throughput) == (2, "h", 1.23)
    assert r.column("host") == "h" and r.column("verdict") == r.assessment.verdict == "compute-bound"
    assert Record.of(**r.to_dict()) == r
    assert r.with_columns(num_workers=3, rank=1).settings.num_workers == 3 and r.settings.num_workers == 2
    with pytest.raises(TypeError):
        Record.of(trial="a", no_such_column=1)
