"""The OpAmp report: Tables 3-5 and Figs. 5/6 beside the published numbers.

What the cross-method report reads of it: ``published`` (the paper's numbers), the rows (``rows``,
``label_of``: labels from the cells) and the score frame its fidelity table shares with this
report.
"""

from zoomattn.reporting.opamp import published
from zoomattn.reporting.opamp.labels import label_of, rows
from zoomattn.reporting.opamp.report import KINDS, build_report
from zoomattn.reporting.opamp.tables import scores_frame

__all__ = ["KINDS", "build_report", "label_of", "published", "rows", "scores_frame"]
