"""A table that fits the terminal by leaving out whole columns, least important first, instead of letting rich squeeze
every column into `mis…` and `cor…`; and that leaves out a column no row has a value for (a GPU timing on a CPU).
Off a terminal (a pipe, a file) the console is wide enough that nothing is left out."""

from dataclasses import dataclass

from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

GAP = 2  # cells between two columns
EMPTY = ("", "–")


@dataclass(frozen=True)
class Column:
    heading: str
    justify: str = "left"
    priority: int = 0  # higher: kept longer as the terminal narrows
    wraps: bool = False  # a column that may wrap (a note): it takes the room left, needing only min_width
    min_width: int = 12
    always: bool = False  # drawn even when no row has a value (the marker of the current row)


def fitted_table(columns: list[Column], rows: list[list], width: int, **table_options) -> Table:
    """rows: one cell (str or Text) per column, in the columns' order; table_options go to rich's Table (a padding of
    (0, 1) and pad_edge: gaps of GAP cells, and one at each edge)."""
    keep = [i for i, column in enumerate(columns)
            if column.always or any(_plain(row[i]) not in EMPTY for row in rows)]

    def needed(indexes) -> int:
        return sum(_width(columns[i], [row[i] for row in rows]) for i in indexes) + GAP * max(len(indexes) - 1, 0)

    while len(keep) > 1 and needed(keep) > width:
        keep.remove(min(keep, key=lambda i: (columns[i].priority, -i)))  # the least important, the rightmost first
    layout = {"box": None, "padding": (0, 0, 0, GAP), "pad_edge": False, **table_options}  # gaps of GAP cells
    table = Table(**layout)
    for i in keep:
        column = columns[i]
        table.add_column(column.heading, justify=column.justify, no_wrap=not column.wraps,
                         overflow="fold" if column.wraps else "ellipsis", ratio=1 if column.wraps else None)
    for row in rows:
        table.add_row(*(row[i] for i in keep))
    return table


def _plain(cell) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


def _width(column: Column, cells: list) -> int:
    """What the column takes: its heading or widest cell; a wrapping column, at most its min_width."""
    widest = max([cell_len(column.heading), *(cell_len(_plain(cell)) for cell in cells)])
    return min(widest, column.min_width) if column.wraps else widest
