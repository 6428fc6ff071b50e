"""Tables that never cut a figure: columns are given with a priority, and the least important
ones are left out (the CSV holds them all) until the rest fit the width, each column at least
as wide as its widest cell; headers wrap at spaces, never mid-word."""

from __future__ import annotations

import dataclasses
import io
from dataclasses import dataclass
from typing import Sequence

from rich import box
from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

Cell = str | Text

# Below this width even the essential columns may not fit; the table is then drawn as it is.
NARROWEST = 40


@dataclass(frozen=True)
class Column:
    """One column: its header, its cells (one per row), and how much it matters (0 is kept
    always; larger numbers go first when space runs out)."""

    header: str
    cells: tuple[Cell, ...]
    justify: JustifyMethod = "right"
    priority: int = 0
    wrap: bool = False  # free text that may wrap (notes, flags); figures never do
    names: bool = False  # names that may wrap at spaces where nothing else fits

    @property
    def min_width(self) -> int:
        """The widest cell (figures are never wrapped), or the longest header word."""
        words = [len(w) for w in self.header.split()] or [0]
        cells = [max((len(w) for w in _plain(c).split()), default=0) if self.wrap else len(_plain(c))
                 for c in self.cells] or [0]
        return max(max(words), max(cells))

    @property
    def wrapped_header(self) -> str:
        """The header on as many lines as keep it within the column's width, broken at spaces."""
        lines: list[str] = []
        for given in self.header.splitlines():
            start = len(lines)
            for word in given.split():
                if len(lines) > start and len(lines[-1]) + 1 + len(word) <= self.min_width:
                    lines[-1] += " " + word
                else:
                    lines.append(word)
        return "\n".join(lines)


def _plain(cell: Cell) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def build(columns: Sequence[Column], title: str | None = None, row_styles: Sequence[str] = (),
          flat: bool = False) -> Table:
    """The table; headers on one line each when `flat`, else wrapped to their column's cells.
    Print it with crop=False: where even the essential columns do not fit, its lines run past
    the width (a terminal wraps them) rather than lose a figure."""
    table = Table(title=title, header_style="bold", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  title_justify="left")
    for column in columns:
        table.add_column(column.header if flat else column.wrapped_header,
                         justify=column.justify,
                         min_width=column.min_width, no_wrap=not column.wrap, overflow="fold")
    rows = max((len(c.cells) for c in columns), default=0)
    for i in range(rows):
        style = row_styles[i] if i < len(row_styles) else ""
        table.add_row(*(c.cells[i] if i < len(c.cells) else "" for c in columns), style=style or None)
    return table


# Between two columns: the padding on either side of the (blank) rule of the SIMPLE_HEAD box; none at
# the table's edges.
COLUMN_GAP = 3


def _drawn_width(columns: Sequence[Column], flat: bool) -> int:
    """How wide the table is drawn with room to spare."""
    drawn = io.StringIO()
    console = Console(width=10_000, file=drawn, color_system=None)
    console.print(build(columns, flat=flat))
    return max((len(line.rstrip()) for line in drawn.getvalue().splitlines()), default=0)


def _widest(c: Column, flat: bool) -> int:
    header = c.header if flat else c.wrapped_header
    cells = max((len(_plain(cell)) for cell in c.cells), default=0)
    return max(cells, max((len(line) for line in header.splitlines()), default=0))


class Widths:
    """Each column's width as drawn alone, measured once: a table with room to spare is as wide
    as its columns and the gaps between them, so the fitting below tries column sets without
    drawing each."""

    def __init__(self) -> None:
        self._drawn: dict[tuple[int, bool], int] = {}

    def needed(self, columns: Sequence[Column], flat: bool = False) -> int:
        """The narrowest the table can be drawn with every figure whole: as drawn with room to
        spare, less what its free-text columns give up by wrapping down to their longest word."""
        natural = sum(self._alone(c, flat) for c in columns) + COLUMN_GAP * max(len(columns) - 1, 0)
        return natural - sum(_widest(c, flat) - c.min_width for c in columns if c.wrap)

    def _alone(self, column: Column, flat: bool) -> int:
        key = (id(column), flat)
        if key not in self._drawn:
            self._drawn[key] = _drawn_width([column], flat)
        return self._drawn[key]


def fitted(columns: Sequence[Column], width: int, flat: bool, widths: Widths) -> list[Column]:
    """The columns that fit `width`: the least important left out first (the last of equal
    priority first)."""
    kept = list(columns)
    while widths.needed(kept, flat) > width:
        droppable = [i for i, c in enumerate(kept) if c.priority > 0]
        if not droppable or width < NARROWEST:
            break
        worst = max(droppable, key=lambda i: (kept[i].priority, i))
        del kept[worst]
    return kept


def fitted_table(choices: Sequence[Sequence[Column]], width: int | None, title: str | None = None,
                 row_styles: Sequence[str] = ()) -> Table:
    """Of several versions of a table (full trial names, short ones; headers on one line or
    wrapped), the one that keeps the most columns at `width` (the first version, then one-line
    headers, on a tie). Where none fits, the last version with its names wrapped at spaces (a
    `names` column); where even that does not fit, the narrowest. All columns of the first
    version where `width` is None."""
    if width is None:
        return build(choices[0], title, row_styles, flat=True)
    last = [dataclasses.replace(c, wrap=True) if c.names else c for c in choices[-1]]
    best: tuple[tuple[bool, int, int, bool], list[Column], bool] | None = None
    widths = Widths()
    for index, columns in enumerate([*choices, last]):
        for flat in (True, False):
            # The last resort keeps the essential columns alone, so that the names wrap least.
            kept = fitted(columns, width, flat, widths) if index < len(choices) else \
                [c for c in columns if not c.priority]
            needed = widths.needed(kept, flat)
            fit = needed <= width
            score = (fit, (len(kept) if index < len(choices) else 0) if fit else -needed, -index, flat)
            if best is None or score > best[0]:
                best = (score, kept, flat)
    assert best is not None
    return build(best[1], title, row_styles, flat=best[2])
