"""The LKG-RALM report: Table 2 (ablations), Figs. 6a/6b (robustness) and Fig. 2 (head patterns)
beside the published numbers.

What the cross-method report reads of it: ``published`` and Table 2's rows (``row_label``,
``table2_rows``, ``scores_frame``, ``MAIN_SPLIT``), so that its fidelity table and claims name and
map rows as this report does.
"""

from zoomattn.reporting.lkg import published
from zoomattn.reporting.lkg.report import KINDS, build_report
from zoomattn.reporting.lkg.table2 import MAIN_SPLIT, row_label, scores_frame, table2_rows

__all__ = [
    "KINDS",
    "MAIN_SPLIT",
    "build_report",
    "published",
    "row_label",
    "scores_frame",
    "table2_rows",
]
