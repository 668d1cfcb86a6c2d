"""The MuDAF report: Tables 2 and 4, Figs. 3-6 and App. C beside the published numbers.

What the cross-method report reads of it: ``published`` and the report's rows (``mudaf_cells``,
``roles``, ``sweep_rows``, ``BASE_ROW``), so that its fidelity table and claims name and map rows
as this report does.
"""

from zoomattn.reporting.mudaf import published
from zoomattn.reporting.mudaf.heads import mudaf_cells
from zoomattn.reporting.mudaf.report import BASE_ROW, KINDS, build_report, roles, sweep_rows

__all__ = ["KINDS", "BASE_ROW", "build_report", "mudaf_cells", "published", "roles", "sweep_rows"]
