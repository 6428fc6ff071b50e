"""loadtune compare: alignment, winners, tau-b, flags and verdict on small golden CSVs.

Fixtures (tests/fixtures/compare/), baseline throughput 200 [190-210] unless said:
  base          num_workers=2 wins (=1, 320), num_workers=4 tied (=1), prefetch_factor=4 helps (215/200 > 1),
                num_workers=0 hurts, pin_memory=true skipped
  same          another host and shm, same ranking
  flipped       scale 8: num_workers=4 wins alone, num_workers=2 drops to rank 2 (leaves the tie group)
  hurts         prefetch_factor=4 at 190 [180-196]: hurts (196/200 < 1), shares rank 3 with baseline
  failed        num_workers=4 failed, num_workers=0 timeout, a `combined` row only this file has
  other_config  base's rows under another config_name / config_sha
  swapped       another host: num_workers=4 measures fastest, num_workers=2 still tied with it (=1)
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from loadtune.comparison.files import compare, kendall_tau_b, load_results
from loadtune.comparison.values import (
    ABSENT,
    HELPS_TO_HURTS,
    HURTS_TO_HELPS,
    STATUS_CHANGED,
    TIE_GROUP_CHANGED,
    VERDICT_HOLDS,
    VERDICT_TIED,
    WINNER_CHANGED,
    WINNER_WITHIN_NOISE,
    Comparison,
)
from loadtune.core.errors import ResultsError
from loadtune.present.compare_text import comparison_lines, comparison_table, write_aligned
from loadtune.record.record import COLUMNS

FIXTURES = Path(__file__).parent / "fixtures" / "compare"
SPEC_COLUMNS = COLUMNS[:COLUMNS.index("started_at") + 1]


def run(*names: str, force: bool = False) -> Comparison:
    return compare(load_results([FIXTURES / f"{n}.csv" for n in names]), force=force)


def col(comparison: Comparison, metric: str, label: str, trial: str):
    table = comparison.table
    return table.loc[table["trial"] == trial, f"{metric}@{label}"].item()


# --- fixtures ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["base", "same", "flipped", "hurts", "failed", "other_config"])
def test_fixtures_have_every_spec_column_in_order(name):
    header = list(pd.read_csv(FIXTURES / f"{name}.csv", nrows=0).columns)
    assert header[:len(SPEC_COLUMNS)] == list(SPEC_COLUMNS)


# --- Kendall tau-b -------------------------------------------------------------------------


def test_tau_b_textbook_values():
    assert kendall_tau_b([1, 2, 3, 4, 5], [1, 2, 3, 4, 5]) == pytest.approx(1.0)
    assert kendall_tau_b([1, 2, 3, 4, 5], [5, 4, 3, 2, 1]) == pytest.approx(-1.0)
    # (1,2) C, (1,3) C, (2,3) D: (2 - 1) / 3
    assert kendall_tau_b([1, 2, 3], [1, 3, 2]) == pytest.approx(1 / 3)
    # 6 pairs: C=4, one tied in x only, one tied in y only: 4 / sqrt(5 * 5)
    assert kendall_tau_b([1, 1, 2, 3], [1, 2, 2, 3]) == pytest.approx(0.8)


def test_tau_b_with_ties_on_both_sides():
    # scipy.stats.kendalltau's documented example: C=2, D=6, n1=2 (x ties), n2=1 (y ties):
    # -4 / sqrt((10 - 2) * (10 - 1)) = -0.47140452079103173
    assert kendall_tau_b([12, 2, 1, 12, 2], [1, 4, 7, 1, 0]) == pytest.approx(-0.47140452079103173)
    # competition ranks of base vs flipped: one x tie, 9 concordant pairs: 9 / sqrt(9 * 10)
    assert kendall_tau_b([1, 1, 3, 4, 5], [2, 1, 3, 4, 5]) == pytest.approx(3 / math.sqrt(10))


def test_tau_b_undefined_cases():
    assert kendall_tau_b([], []) is None
    assert kendall_tau_b([1], [2]) is None
    assert kendall_tau_b([1, 1, 1], [1, 2, 3]) is None  # every pair tied in x
    with pytest.raises(ValueError):
        kendall_tau_b([1, 2], [1, 2, 3])
    with pytest.raises(ValueError):
        kendall_tau_b([1, float("nan")], [1, 2])


# --- comparisons ---------------------------------------------------------------------------


def test_identical_rankings_hold():
    c = run("base", "same")
    assert c.files.labels == ("base", "same")
    assert c.winners == {"base": "num_workers=2", "same": "num_workers=2"}
    assert c.conclusion.tau["same"] == pytest.approx(1.0)
    assert c.verdict == VERDICT_HOLDS
    assert c.changed is False
    assert c.conclusion.flags == {}
    assert set(c.files.differences) == {"host", "shm_free_gb"}
    assert c.files.differences["host"] == {"base": "vm", "same": "vm2"}


def test_flipped_winner_changes_the_conclusion():
    c = run("base", "flipped")
    assert c.winners == {"base": "num_workers=2", "flipped": "num_workers=4"}
    assert c.changed is True
    assert WINNER_CHANGED in c.conclusion.flags["num_workers=4"]
    assert WINNER_CHANGED not in c.conclusion.flags.get("num_workers=2", [])
    assert TIE_GROUP_CHANGED in c.conclusion.flags["num_workers=2"]  # tied with best in base, not in flipped
    assert c.verdict.startswith("conclusion changed: ")
    assert "num_workers=4" in c.verdict and "flipped" in c.verdict
    assert "\n" not in c.verdict
    assert c.conclusion.tau["flipped"] == pytest.approx(3 / math.sqrt(10))
    assert c.files.differences["scale"] == {"base": 1.0, "flipped": 8.0}


def test_helps_then_hurts_changes_the_conclusion():
    c = run("base", "hurts")
    assert c.winners["hurts"] == "num_workers=2"
    assert c.conclusion.flags["prefetch_factor=4"] == [HELPS_TO_HURTS]
    assert not any(WINNER_CHANGED in f for f in c.conclusion.flags.values())
    assert c.changed is True
    assert "prefetch_factor=4 helps in base but hurts in hurts" in c.verdict
    # ranks (1,1,3,4,5) vs (1,1,3,3,5): C=8, one pair tied in both, one tied in y: 8 / sqrt(9 * 8)
    assert c.conclusion.tau["hurts"] == pytest.approx(8 / math.sqrt(72))


def test_hurts_then_helps_is_flagged_the_other_way():
    c = run("hurts", "base")
    assert c.conclusion.flags["prefetch_factor=4"] == [HURTS_TO_HELPS]
    assert c.changed is True


def test_trials_whose_speedup_interval_holds_one_are_not_flagged():
    c = run("base", "same")
    assert "baseline" not in c.conclusion.flags
    assert "num_workers=0" not in c.conclusion.flags  # hurts in both


def test_different_configs_are_refused_naming_both_files_and_values():
    with pytest.raises(ResultsError) as info:
        run("base", "other_config")
    message = str(info.value)
    assert "\n" not in message
    assert "base.csv" in message and "other_config.csv" in message
    assert "demo-images" in message and "demo-text" in message
    assert "63e12df045c8" in message and "0a1b2c3d4e5f" in message


def test_different_configs_are_compared_with_force():
    c = run("base", "other_config", force=True)
    assert c.changed is False
    assert c.files.differences["config_name"] == {"base": "demo-images", "other_config": "demo-text"}
    assert "config_sha" in c.files.differences


def test_failed_skipped_and_absent_rows_are_shown():
    c = run("base", "failed")
    # `combined` is named as the sweep names its config anywhere else: what differs from the baseline.
    combined = "num_workers=2, prefetch_factor=4"
    assert list(c.table["trial"]) == ["num_workers=2", "num_workers=4", "prefetch_factor=4", "baseline",
                                      "num_workers=0", "pin_memory=true", combined]
    assert col(c, "status", "failed", "num_workers=4") == "failed"
    assert col(c, "reason", "failed", "num_workers=4").startswith("worker process crashed")
    assert col(c, "status", "failed", "num_workers=0") == "timeout"
    assert col(c, "status", "base", "pin_memory=true") == "skipped"
    assert col(c, "status", "base", combined) == ABSENT
    assert pd.isna(col(c, "rank", "failed", "num_workers=4"))
    assert col(c, "rank", "failed", combined) == 2
    assert STATUS_CHANGED in c.conclusion.flags["num_workers=4"]
    assert STATUS_CHANGED in c.conclusion.flags[combined]
    assert "pin_memory=true" not in c.conclusion.flags  # skipped in both
    # the winner still runs and wins: tau over the trials ok in both (num_workers=2, prefetch, baseline)
    assert c.changed is False and c.verdict == VERDICT_HOLDS
    assert c.conclusion.tau["failed"] == pytest.approx(1.0)


def test_many_files_are_compared_against_the_first():
    c = run("base", "same", "flipped", "hurts", "failed")
    assert c.files.labels == ("base", "same", "flipped", "hurts", "failed")
    assert set(c.conclusion.tau) == set(c.files.labels)
    assert c.conclusion.flags["num_workers=4"][0] == WINNER_CHANGED
    assert HELPS_TO_HURTS in c.conclusion.flags["prefetch_factor=4"]
    assert c.changed is True


def test_a_file_where_nothing_ran_changes_the_conclusion(tmp_path):
    frame = pd.read_csv(FIXTURES / "base.csv", dtype=str, keep_default_na=False)
    frame["status"] = "failed"
    for column in ("rank", "throughput", "throughput_lo", "throughput_hi", "tied_with_best"):
        frame[column] = ""
    frame.to_csv(tmp_path / "broken.csv", index=False)
    c = compare(load_results([FIXTURES / "base.csv", tmp_path / "broken.csv"]))
    assert c.winners["broken"] is None
    assert c.conclusion.tau["broken"] is None
    assert c.changed is True
    assert "no trial ran in broken" in c.verdict


def test_same_stem_twice_gets_unique_labels(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for folder in ("a", "b"):
        (tmp_path / folder / "results.csv").write_bytes((FIXTURES / "base.csv").read_bytes())
    labels = [r.label for r in load_results([tmp_path / "a/results.csv", tmp_path / "b/results.csv"])]
    assert labels == ["a/results", "b/results"]
    same_file = load_results([FIXTURES / "base.csv", FIXTURES / "base.csv"])
    assert len({r.label for r in same_file}) == 2
    assert compare(same_file).changed is False


def test_fewer_than_two_files_is_an_error():
    with pytest.raises(ResultsError):
        compare(load_results([FIXTURES / "base.csv"]))


# --- reading errors ------------------------------------------------------------------------


def test_missing_columns_are_named(tmp_path):
    path = tmp_path / "partial.csv"
    pd.read_csv(FIXTURES / "base.csv").drop(columns=["throughput_lo", "tied_with_best"]).to_csv(path, index=False)
    with pytest.raises(ResultsError) as info:
        load_results([FIXTURES / "base.csv", path])
    message = str(info.value)
    assert str(path) in message
    assert "throughput_lo" in message and "tied_with_best" in message


@pytest.mark.parametrize("content", [None, b"", b"\xff\xfe\x00garbage\x00\n\x01,\x02\n", b"just,a,header\n"])
def test_unreadable_files_name_the_file(tmp_path, content):
    path = tmp_path / "bad.csv"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ResultsError) as info:
        load_results([path])
    assert str(path) in str(info.value)


def test_bad_numbers_and_duplicate_trials_are_refused(tmp_path):
    frame = pd.read_csv(FIXTURES / "base.csv", dtype=str, keep_default_na=False)
    bad = frame.copy()
    bad.loc[0, "throughput"] = "fast"
    bad.to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(ResultsError, match="throughput.*'fast'"):
        load_results([tmp_path / "bad.csv"])
    pd.concat([frame, frame.iloc[:1]]).to_csv(tmp_path / "dup.csv", index=False)
    with pytest.raises(ResultsError, match="num_workers=2.*more than once"):
        load_results([tmp_path / "dup.csv"])


# --- output --------------------------------------------------------------------------------


def test_write_aligned_reads_back_with_pandas(tmp_path):
    c = run("base", "flipped", "failed")
    path = write_aligned(c, tmp_path / "out" / "aligned.csv")
    back = pd.read_csv(path)
    assert list(back["trial"]) == list(c.table["trial"])
    assert back.columns[0] == "trial" and back.columns[-1] == "flags"
    for label in c.files.labels:
        for metric in ("status", "rank", "tied_with_best", "throughput", "throughput_lo", "throughput_hi",
                       "wait_ratio", "wait_ratio_lo", "wait_ratio_hi", "speedup"):
            assert f"{metric}@{label}" in back.columns
    row = back.set_index("trial")
    assert row.loc["num_workers=4", "throughput@flipped"] == pytest.approx(400.0)
    assert row.loc["num_workers=4", "throughput_hi@flipped"] == pytest.approx(420.0)
    assert row.loc["num_workers=4", "rank@flipped"] == 1
    assert row.loc["num_workers=4", "status@failed"] == "failed"
    assert row.loc["num_workers=2, prefetch_factor=4", "status@base"] == ABSENT
    assert row.loc["num_workers=2", "tied_with_best@base"] in (True, "true")
    assert row.loc["num_workers=2", "tied_with_best@flipped"] in (False, "false")
    assert WINNER_CHANGED in row.loc["num_workers=4", "flags"]
    assert pd.isna(row.loc["baseline", "flags"])


def test_table_and_lines_render_without_printing(capsys):
    c = run("base", "flipped", "failed")
    console = Console(file=io.StringIO(), width=260, record=True)
    console.print(comparison_table(c))
    text = console.export_text()
    for expected in ("num_workers=4", "winner changed", "skipped", "failed", "timeout", ABSENT, "=1",
                     "400.0 [380.0-420.0]"):
        assert expected in text
    lines = comparison_lines(c)
    assert lines[0] == "winner: base num_workers=2, flipped num_workers=4, failed num_workers=2"
    assert any(line.startswith("differs: scale:") for line in lines)
    assert any("Kendall tau-b" in line for line in lines)
    assert lines[-1] == c.verdict
    assert capsys.readouterr() == ("", "")


def test_a_file_without_rows_is_not_refused_as_another_config(tmp_path):
    path = tmp_path / "empty.csv"
    path.write_text(",".join(COLUMNS) + "\n")
    c = compare(load_results([FIXTURES / "base.csv", path]))
    assert set(c.table["status@empty"]) == {ABSENT}
    assert c.changed is True and "no trial ran in empty" in c.verdict


def test_winners_swapping_within_the_tie_group_is_not_a_flip():
    """swapped: num_workers=4 now measures fastest, but both stay tied with the best in both files."""
    comparison = run("base", "swapped")
    assert comparison.winners == {"base": "num_workers=2", "swapped": "num_workers=4"}
    assert not comparison.changed
    assert comparison.verdict == f"{VERDICT_TIED} (num_workers=2 in base, num_workers=4 in swapped)"
    assert WINNER_WITHIN_NOISE in comparison.conclusion.flags["num_workers=4"]


def test_predictions_stand_beside_measurements(tmp_path):
    """A config one file measured and the other only predicted shows both, and is no status change."""
    base = pd.read_csv(FIXTURES / "base.csv")
    base["predicted_throughput"] = base["throughput"] * 1.05
    other = base.copy()
    row = other["trial"] == "num_workers=4"
    for column in ("rank", "throughput", "throughput_lo", "throughput_hi", "wait_ratio", "wait_ratio_lo",
                   "wait_ratio_hi", "speedup", "tied_with_best"):
        other.loc[row, column] = None
    other.loc[row, "status"] = "predicted"
    base.to_csv(tmp_path / "a.csv", index=False)
    other.to_csv(tmp_path / "b.csv", index=False)
    c = compare(load_results([tmp_path / "a.csv", tmp_path / "b.csv"]))
    expected = base.loc[base["trial"] == "num_workers=4", "predicted_throughput"].item()
    assert col(c, "predicted_throughput", "b", "num_workers=4") == pytest.approx(expected)
    assert col(c, "status", "b", "num_workers=4") == "predicted"
    assert STATUS_CHANGED not in c.conclusion.flags.get("num_workers=4", [])
    out = io.StringIO()
    Console(file=out, width=250).print(comparison_table(c))
    text = out.getvalue()
    assert "predicted" in text and f"{expected:.1f}" in text
