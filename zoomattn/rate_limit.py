"""Snakemake's default job rate limit, dropped for our runs: its timers multiply.

Snakemake 9 limits job starts to ``--max-jobs-per-timespan`` (default 100 per second). While the
limit is set, every pass of its scheduling loop arms a timer that wakes the loop again one timespan
later, and each wake-up is another pass that arms another timer (snakemake/snakemake#3804). So
every job that finishes starts one more chain of wake-ups that lasts the rest of the run: over
the smoke grid's 215 jobs the loop ran 12,077 times (70 a second on average, more as jobs
finished), each pass re-reading every ready job's input sizes, and on a 2-core machine it took
CPU from the jobs. On a cluster the submitting process does the same for the whole grid's hours.

Without the limit the loop wakes when a job finishes, as in Snakemake 7. A limit the user chose
(any value but the default) is kept, cost and all.
"""

from __future__ import annotations

DEFAULT = (100, 1)  # Snakemake's --max-jobs-per-timespan default: 100 jobs per 1 s
DROPPED = "Snakemake's default job rate limit (100/1s) dropped: its timers multiply (#3804)"


def drop_default_rate_limit(scheduler) -> str:
    """Remove the scheduler's job rate limiter when it is Snakemake's default; returns what was
    done, for the run's log."""
    limiter = getattr(scheduler, "job_rate_limiter", None)
    if limiter is None:
        return "no job rate limit"
    if (limiter.max_jobs, limiter.timespan) != DEFAULT:
        return (
            f"job rate limit {limiter.max_jobs}/{limiter.timespan}s kept (given by the user; "
            "its timers wake the scheduler more often with each finished job)"
        )
    scheduler.job_rate_limiter = None
    return DROPPED
