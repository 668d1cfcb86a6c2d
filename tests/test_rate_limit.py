"""Snakemake's default job rate limit is dropped, a user's own is kept (Snakemake's own classes)."""

from types import SimpleNamespace

from snakemake.scheduling.job_scheduler import JobRateLimiter
from snakemake.settings.types import MaxJobsPerTimespan

from zoomattn.rate_limit import DROPPED, drop_default_rate_limit


def _scheduler(limit: str | None) -> SimpleNamespace:
    limiter = JobRateLimiter(MaxJobsPerTimespan.parse_choice(limit)) if limit else None
    return SimpleNamespace(job_rate_limiter=limiter)


def test_snakemakes_default_limit_is_dropped():
    scheduler = _scheduler("100/1s")
    assert drop_default_rate_limit(scheduler) == DROPPED
    assert scheduler.job_rate_limiter is None


def test_a_limit_the_user_chose_is_kept_and_named():
    for limit in ("10/1s", "100/1m"):
        scheduler = _scheduler(limit)
        limiter = scheduler.job_rate_limiter
        assert "kept" in drop_default_rate_limit(scheduler)
        assert scheduler.job_rate_limiter is limiter


def test_no_limit_stays_none():
    scheduler = _scheduler(None)
    assert drop_default_rate_limit(scheduler) == "no job rate limit"
    assert scheduler.job_rate_limiter is None


def test_the_cli_default_is_the_one_dropped():
    """Snakemake's command line still defaults to 100/1s (a new default would go unnoticed)."""
    from snakemake.cli import get_argument_parser

    default = get_argument_parser().get_default("max_jobs_per_timespan")
    scheduler = _scheduler(default)
    assert "dropped" in drop_default_rate_limit(scheduler)
    assert scheduler.job_rate_limiter is None
