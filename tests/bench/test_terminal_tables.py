"""Tables fit the terminal (issue 41, item 6).

On an 80-column terminal rich cut the benchmark tables' cells short with an ellipsis
(``fast_s…``, ``triang…``) and ``hardgrad list`` ran past the edge. Now a text cell folds, a
table too wide is printed in parts that each repeat the first column, numbers are never
broken, and ``hardgrad list`` wraps its descriptions on a terminal and prints them whole
when piped.
"""

from __future__ import annotations

import io
import re

import pytest

pytest.importorskip("rich")

from rich.console import Console

from hardgrad.bench._task import Table, TaskResult
from hardgrad.bench.cli import main
from hardgrad.bench.report import _print_rich, print_result

# The shape of the speed task's widest table: long names, many numeric columns.
WIDE = Table(
    "per op: forward+backward time (µs) against hand-written alternatives",
    ["op", "surrogate", "hardgrad", "detach trick", "autograd.Function", "native", "ratio",
     "bytes saved", "rounds faster", "compiled hardgrad", "compiled ratio"],
    [
        ["fast_sigmoid", "triangle", "12.3", "14.5", "20.1", "n/a", "0.85×", "4096",
         "17/20", "9.8", "1.02×"],
        ["approx_sign", "stochastic_times_smooth", "1.3", "1.5", "2.1", "1.0", "0.85×",
         "409600", "17/20", "1234567.8", "0.99×"],
        ["one_hot_argmax", "-", "123.25", "140.5", "201.0", "99.5", "1.24×", "8", "3/20",
         "-", "n/a"],
    ],
)  # fmt: skip
NARROW = Table("summary", ["estimator", "bias"], [["gumbel_softmax", "0.01"], ["st", "0.2"]])
RESULT = TaskResult("speed", "forward+backward time", {}, {}, [WIDE, NARROW])


def _rich_lines(width: int) -> list[str]:
    buffer = io.StringIO()
    _print_rich(RESULT, Console(file=buffer, width=width, color_system=None))
    return buffer.getvalue().splitlines()


@pytest.mark.parametrize("width", [80, 60, 40])
def test_rich_tables_fit_the_width_and_cut_nothing_short(width: int) -> None:
    lines = _rich_lines(width)
    text = "\n".join(lines)
    assert "…" not in text
    assert max(len(line) for line in lines) <= width
    cells = re.findall(r"\S+", text)
    for table in RESULT.tables:
        for row in table.rows:
            for value in row[2:] if table is WIDE else row[1:]:
                if value[0].isdigit():  # numbers are never broken
                    assert value in cells, (value, width)
    if width >= 60:  # names up to 14 characters are not even folded at 60 columns
        for name in ("fast_sigmoid", "approx_sign", "one_hot_argmax", "gumbel_softmax"):
            assert name in cells, (name, width)


def test_a_table_that_fits_is_printed_in_one_part() -> None:
    lines = _rich_lines(200)
    assert not any("part 1 of" in line for line in lines)
    (header,) = [ln for ln in lines if "surrogate" in ln and "native" in ln]
    assert "compiled ratio" in header


def test_a_wide_table_repeats_its_first_column_in_every_part() -> None:
    lines = _rich_lines(60)
    parts = [ln for ln in lines if "(part " in ln or re.search(r"part \d+ of \d+\)", ln)]
    assert parts, lines
    assert sum("one_hot_argmax" in ln for ln in lines) >= 2


def test_piped_results_are_markdown_at_full_width() -> None:
    out = io.StringIO()
    print_result(RESULT, out)
    text = out.getvalue()
    assert "…" not in text
    for row in WIDE.rows:
        assert re.search(r"\| " + r"\s*\|\s*".join(map(re.escape, row)) + r"\s*\|", text)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_hardgrad_list_wraps_to_the_terminal_and_is_whole_when_piped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os

    monkeypatch.setattr("shutil.get_terminal_size", lambda *a: os.terminal_size((80, 24)))
    terminal = _Terminal()
    monkeypatch.setattr("sys.stdout", terminal)
    assert main(["list"]) == 0
    wrapped = terminal.getvalue().splitlines()
    assert max(len(line) for line in wrapped) <= 80
    assert "…" not in terminal.getvalue()

    piped = io.StringIO()
    monkeypatch.setattr("sys.stdout", piped)
    assert main(["list"]) == 0
    whole = piped.getvalue().splitlines()
    assert len(whole) < len(wrapped)
    assert max(len(line) for line in whole) > 80  # not cut to a terminal's width
    # The same text either way: wrapping (or folding a word longer than the room) moved
    # it, it dropped nothing.
    assert "".join(terminal.getvalue().split()) == "".join(piped.getvalue().split())
