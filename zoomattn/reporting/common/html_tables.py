"""A report table's html form: what `snakemake --report` shows of it (the .md form stays markdown).

A real <table> page with no index column (nor the pivot's column-axis name as one), markdown bold
(``**x**``, the leaderboard's best cells) as <strong>, every other character escaped.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pandas as pd

BOLD = re.compile(r"\*\*(.+?)\*\*")
PAGE = """<!DOCTYPE html>
<html>
<head>
<meta charset="utf-8">
<style>
body {{ font-family: sans-serif; font-size: 14px; margin: 12px; }}
table {{ border-collapse: collapse; }}
th, td {{ border: 1px solid #bbb; padding: 3px 8px; text-align: left; vertical-align: top; }}
th {{ background: #eee; }}
</style>
</head>
<body>
{table}
</body>
</html>
"""


def _text_cell(value):
    """A string cell as html: escaped, its **bold** spans as <strong>; other values unchanged."""
    if not isinstance(value, str):
        return value
    return BOLD.sub(r"<strong>\1</strong>", html.escape(value))


def _is_text(column: pd.Series) -> bool:
    return not (pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column))


def table_html(table: pd.DataFrame, float_format: str | None = None) -> str:
    """The html page of ``table``: its columns only, missing values blank."""
    columns = [  # by position: a table may repeat a column name
        column.astype(object).map(_text_cell) if _is_text(column) else column
        for _, column in table.items()
    ]
    shown = pd.concat(columns, axis=1, ignore_index=True) if columns else pd.DataFrame()
    shown.columns = [html.escape(str(name)) for name in table.columns]
    body = shown.to_html(index=False, escape=False, na_rep="", border=0, float_format=float_format)
    return PAGE.format(table=body)


def write_table_html(table: pd.DataFrame, path: Path, float_format: str | None = None) -> None:
    Path(path).write_text(table_html(table, float_format))
