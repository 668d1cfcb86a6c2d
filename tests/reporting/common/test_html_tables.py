from html.parser import HTMLParser

import numpy as np
import pandas as pd

from zoomattn.reporting.common.html_tables import table_html, write_table_html


class _Cells(HTMLParser):
    """The header and body cells of an html page's table, each as its inner html."""

    def __init__(self, page: str):
        super().__init__()
        self.header: list[str] = []
        self.rows: list[list[str]] = []
        self._in_body = False
        self._cell: list[str] | None = None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        if tag == "tbody":
            self._in_body = True
        elif tag == "tr" and self._in_body:
            self.rows.append([])
        elif tag in ("th", "td"):
            self._cell = []
        elif self._cell is not None:
            self._cell.append(f"<{tag}>")

    def handle_endtag(self, tag):
        if tag in ("th", "td"):
            (self.rows[-1] if self._in_body else self.header).append("".join(self._cell))
            self._cell = None
        elif self._cell is not None:
            self._cell.append(f"</{tag}>")

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _pivoted() -> pd.DataFrame:
    """A leaderboard-like table: a pivot (its column axis is named) with bold cells."""
    long = pd.DataFrame(
        {
            "label": ["A", "A", "B", "B"],
            "column": ["r=0", "mean", "r=0", "mean"],
            "text": ["**2.1 [0.0, 8.3]** ↑", "**1.0 [0.0, 4.2]**", "0.5 [0.0, 1.0] ↓", "0.3"],
        }
    )
    table = long.pivot(index="label", columns="column", values="text")
    return table.reset_index().rename(columns={"label": "method"})


def test_bold_marks_become_strong_markup_and_no_asterisks_remain():
    cells = _Cells(table_html(_pivoted()))
    assert cells.rows[0][1] == "<strong>1.0 [0.0, 4.2]</strong>"
    assert cells.rows[0][2] == "<strong>2.1 [0.0, 8.3]</strong> ↑"
    assert all("**" not in c for row in cells.rows for c in row)


def test_pivot_column_axis_name_and_index_do_not_become_a_column():
    table = _pivoted()
    assert table.columns.name == "column"  # what pandas printed as an empty first column
    cells = _Cells(table_html(table))
    assert cells.header == ["method", "mean", "r=0"]
    assert [row[0] for row in cells.rows] == ["A", "B"]
    assert all(len(row) == 3 for row in cells.rows)


def test_text_and_column_names_are_escaped_outside_bold_spans():
    table = pd.DataFrame({"a<b": ["x < y & **z<1**"]})
    page = table_html(table)
    assert "<th>a&lt;b</th>" in page
    assert "<td>x &lt; y &amp; <strong>z&lt;1</strong></td>" in page


def test_missing_values_are_blank_and_float_format_applies_to_numbers():
    table = pd.DataFrame({"name": ["a", None], "score": [0.123456, np.nan]})
    cells = _Cells(table_html(table, float_format="%.3f"))
    assert cells.rows == [["a", "0.123"], ["", ""]]


def test_written_page_declares_utf8_and_holds_one_table(tmp_path):
    path = tmp_path / "t.html"
    write_table_html(pd.DataFrame({"ξ": ["Δ"]}), path)
    page = path.read_text()
    assert '<meta charset="utf-8">' in page and page.count("<table") == 1
    assert "<th>ξ</th>" in page and "<td>Δ</td>" in page
