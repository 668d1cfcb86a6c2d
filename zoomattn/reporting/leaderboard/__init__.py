"""The cross-method report: the leaderboard, the fidelity table with the papers' claims, and the
attention diagnostics of every model of the grid. It reads the papers' rows and published numbers
only through what each paper package's ``__init__`` exports."""

from zoomattn.reporting.leaderboard.report import KINDS, build_report

__all__ = ["KINDS", "build_report"]
