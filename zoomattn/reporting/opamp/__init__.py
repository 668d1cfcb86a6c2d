"""The OpAmp report: Tables 3-5 and Figs. 5/6 beside the published numbers.

What the cross-method report reads of it: ``published`` (the paper's numbers) and the model labels
and score frame its fidelity table shares with this report.
"""

from zoomattn.reporting.opamp import published
from zoomattn.reporting.opamp.report import KINDS, build_report
from zoomattn.reporting.opamp.tables import model_label, scores_frame

__all__ = ["KINDS", "build_report", "model_label", "published", "scores_frame"]
