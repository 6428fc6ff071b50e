"""loadtune compare: a winner that differs within the tie group (tied_with_best in both files) is
the same conclusion, and the table's cells stay within two rows at 100 and 80 columns."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from loadtune.cli import app
from loadtune.comparison.files import compare, load_results
from loadtune.comparison.values import (
    FLAG_CODES,
    VERDICT_CHANGED,
    VERDICT_HOLDS,
    VERDICT_TIED,
    WINNER_CHANGED,
    WINNER_WITHIN_NOISE,
    Comparison,
)
from loadtune.present.compare_text import FLAGS_HEADER, comparison_table
from loadtune.record.record import ResultsFile, load_records

FIXTURES = Path(__file__).parent / "fixtures" / "compare"
EXIT_FLIPPED = 3
# Each row as (trial, rank, tied_with_best, throughput): the base fixture's measured rows.
FIRST = (("num_workers=2", 1, True, 320.0), ("num_workers=4", 1, True, 310.0),
         ("prefetch_factor=4", 3, False, 230.0), ("baseline", 4, False, 200.0), ("num_workers=0", 5, False, 150.0))
# num_workers=4 now measures fastest; num_workers=2 is still tied with it.
SWAPPED = (("num_workers=4", 1, True, 330.0), ("num_workers=2", 1, True, 318.0),
           ("prefetch_factor=4", 3, False, 230.0), ("baseline", 4, False, 200.0), ("num_workers=0", 5, False, 150.0))
# num_workers=4 wins, and num_workers=2 is no longer tied with it, though it was in FIRST.
BEATEN = (("num_workers=4", 1, True, 400.0), ("num_workers=2", 2, False, 318.0),
          ("prefetch_factor=4", 3, False, 230.0), ("baseline", 4, False, 200.0), ("num_workers=0", 5, False, 150.0))
INTERVAL_SHARE = 0.05  # each row's 95% interval: its throughput +- this share


def sweep(path: Path, rows: tuple[tuple[str, int, bool | None, float], ...]) -> Path:
    """A sweep's CSV written by the Record writer: base.csv's rows with the ranks, ties and
    throughputs of `rows` (every row ran, so every row has a tied_with_best)."""
    template = {r.trial: r for r in load_records(FIXTURES / "base.csv")}
    records = [template[trial].with_columns(rank=rank, tied_with_best=tied, throughput=throughput,
                                            throughput_lo=throughput * (1 - INTERVAL_SHARE),
                                            throughput_hi=throughput * (1 + INTERVAL_SHARE))
               for trial, rank, tied, throughput in rows]
    ResultsFile(path).replace(records)
    return path


def untied(rows: tuple[tuple[str, int, bool | None, float], ...]) -> tuple[tuple[str, int, bool | None, float], ...]:
    """`rows` as a file written before tied_with_best existed: the column empty."""
    return tuple((trial, rank, None, throughput) for trial, rank, _, throughput in rows)


def fail_on_flip(*paths: Path) -> int:
    result = CliRunner().invoke(app, ["compare", *map(str, paths), "--fail-on-flip"], env={"COLUMNS": "200"})
    return result.exit_code


def test_winners_tied_in_both_files_are_the_same_conclusion(tmp_path):
    a, b = sweep(tmp_path / "a.csv", FIRST), sweep(tmp_path / "b.csv", SWAPPED)
    c = compare(load_results([a, b]))
    assert c.winners == {"a": "num_workers=2", "b": "num_workers=4"}
    assert c.changed is False
    assert c.verdict == f"{VERDICT_TIED} (num_workers=2 in a, num_workers=4 in b)"
    assert c.conclusion.tied == ("num_workers=2 in a, num_workers=4 in b",)
    assert c.conclusion.flags["num_workers=4"] == [WINNER_WITHIN_NOISE]
    # Every row has a tied_with_best: the column reads as numpy's booleans, shown and aligned as ties.
    assert c.table.loc[c.table["trial"] == "num_workers=2", "tied_with_best@b"].item() is True
    assert rendered(c, 200).count("=1") == 4
    assert fail_on_flip(a, b) == 0
    # The other way round too: each file's winner is tied with the best in the other file.
    assert compare(load_results([b, a])).changed is False and fail_on_flip(b, a) == 0


def test_a_winner_that_beat_the_first_files_winner_is_a_flip(tmp_path):
    """num_workers=4 was tied with the best in `a`, but `a`'s winner is not tied in `b`."""
    a, b = sweep(tmp_path / "a.csv", FIRST), sweep(tmp_path / "b.csv", BEATEN)
    c = compare(load_results([a, b]))
    assert c.changed is True and c.verdict.startswith(f"{VERDICT_CHANGED}: winner is num_workers=4 in b")
    assert WINNER_CHANGED in c.conclusion.flags["num_workers=4"] and c.conclusion.tied == ()
    assert fail_on_flip(a, b) == EXIT_FLIPPED


@pytest.mark.parametrize("old", ["a", "b"])
def test_files_without_tied_with_best_keep_calling_a_new_winner_a_flip(tmp_path, old):
    """An empty tied_with_best cannot tell a swap within the tie from a flip."""
    a = sweep(tmp_path / "a.csv", untied(FIRST) if old == "a" else FIRST)
    b = sweep(tmp_path / "b.csv", untied(SWAPPED) if old == "b" else SWAPPED)
    c = compare(load_results([a, b]))
    assert c.changed is True and c.verdict.startswith(VERDICT_CHANGED)
    assert fail_on_flip(a, b) == EXIT_FLIPPED


def test_the_same_winner_still_holds(tmp_path):
    a, b = sweep(tmp_path / "a.csv", FIRST), sweep(tmp_path / "b.csv", FIRST)
    c = compare(load_results([a, b]))
    assert c.verdict == VERDICT_HOLDS and c.conclusion.tied == ()


# --- the table at a terminal's width ----------------------------------------------------------


def row_heights(text: str, rows: int) -> list[int]:
    """How many lines each of the table's `rows` rows takes: a row starts where the first file's
    rank column (right-aligned, never wrapped, never empty) has a character."""
    lines = text.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.lstrip().startswith("─"))
    rank_end = max(line.find("rank") + len("rank") for line in lines[:rule] if "rank" in line) - 1
    body = []
    for line in lines[rule + 1:]:
        if line.startswith(FLAGS_HEADER) or not line.strip():
            break  # the legend under the table
        body.append(line)
    starts = [i for i, line in enumerate(body) if len(line) > rank_end and line[rank_end] != " "]
    assert len(starts) == rows and starts[0] == 0, text
    return [end - start for start, end in zip(starts, [*starts[1:], len(body)])]


def rendered(c: Comparison, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(comparison_table(c, width=width), crop=False)
    out = console.file
    assert isinstance(out, io.StringIO)
    return out.getvalue()


PAIRS = [("base", "flipped"), ("base", "hurts"), ("base", "failed"), ("base", "swapped"), ("flipped", "hurts"),
         ("failed", "flipped")]


@pytest.mark.parametrize("width", [100, 80])
@pytest.mark.parametrize("pair", PAIRS)
def test_no_cell_of_the_compare_table_takes_more_than_two_rows(pair, width):
    c = compare(load_results([FIXTURES / f"{name}.csv" for name in pair]))
    text = rendered(c, width)
    rows = len({t for t in c.table["trial"]})
    heights = row_heights(text, rows)
    assert max(heights) <= 2, text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width, text


@pytest.mark.parametrize("width", [100, 80])
def test_the_flags_show_as_codes_with_their_legend(width):
    c = compare(load_results([FIXTURES / "flipped.csv", FIXTURES / "hurts.csv"]))
    text = rendered(c, width)
    codes = f"{FLAG_CODES[WINNER_CHANGED]} {FLAG_CODES['tie group changed']}"
    assert codes in text and "tie group changed" in text.split(codes)[-1]  # the legend, under the table
    legend = next(line for line in text.splitlines() if line.startswith(FLAGS_HEADER))
    assert legend.rstrip() == f"{FLAGS_HEADER} (flags): W winner changed, +→- helps → hurts, T tie group changed"


@pytest.mark.parametrize("columns", ["100", "80"])
def test_compare_in_a_terminal_of_that_width_wraps_no_cell_past_two_rows(columns):
    paths = [str(FIXTURES / "flipped.csv"), str(FIXTURES / "hurts.csv")]
    result = CliRunner().invoke(app, ["compare", *paths], env={"COLUMNS": columns})
    assert result.exit_code == 0, result.output
    c = compare(load_results(paths))
    assert max(row_heights(result.output, len(c.table))) <= 2, result.output
