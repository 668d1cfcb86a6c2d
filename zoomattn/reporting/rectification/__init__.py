"""The attention-rectification report: Table 1, Figs. 3-5 beside the published numbers.

What the cross-method report reads of it: ``published`` and the report's rows (``grid_rows``), so
that its fidelity table names and maps rows as this report does.
"""

from zoomattn.reporting.rectification import published
from zoomattn.reporting.rectification.report import KINDS, build_report, grid_rows

__all__ = ["KINDS", "build_report", "grid_rows", "published"]
