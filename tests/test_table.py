"""The table fitting measures each column once: a table with room to spare is as wide as its
columns drawn alone and the gaps between them, which the fitting relies on instead of drawing
every set of columns it tries."""

from __future__ import annotations

import io
import itertools

from rich.console import Console
from rich.text import Text

from loadtune.present.table import Column, Widths, build, fitted_table


def _drawn(columns, flat):
    out = io.StringIO()
    Console(width=10_000, file=out, color_system=None).print(build(columns, flat=flat))
    return max((len(line.rstrip()) for line in out.getvalue().splitlines()), default=0)


COLUMNS = (
    Column("rank", ("=1", "2", "ref")),
    Column("trial", ("workers=2 persistent", "baseline", "ideal"), justify="left", names=True),
    Column("samples/s [95%]", ("433.1 [362.1, 519.9]", "243.5 [196.3, 304.7]", "638.0 [637.7, 638.3]"), priority=1),
    Column("wait ratio", (Text("0.302", style="bold"), "0.619", "0.001"), priority=2),
    Column("flags", ("helps tie group", "", "changed"), justify="left", priority=3, wrap=True),
)


def test_a_set_of_columns_needs_the_width_it_is_drawn_at_less_what_free_text_gives_up():
    widths = Widths()
    for count in range(1, len(COLUMNS) + 1):
        for columns in itertools.combinations(COLUMNS, count):
            for flat in (True, False):
                wrapped = [c for c in columns if c.wrap]
                gives_up = sum(max(len(c.header), *(len(str(x)) for x in c.cells)) - c.min_width for c in wrapped)
                assert widths.needed(columns, flat) == _drawn(columns, flat) - gives_up


def test_a_table_too_wide_leaves_out_its_least_important_columns_first():
    out = io.StringIO()
    Console(width=60, file=out, color_system=None).print(fitted_table([COLUMNS], 60), crop=False)
    drawn = out.getvalue()
    assert "rank" in drawn and "trial" in drawn and "samples/s" in drawn
    assert "flags" not in drawn
    assert max(len(line.rstrip()) for line in drawn.splitlines()) <= 60
