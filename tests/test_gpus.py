"""GPU claims: concurrent job processes on one machine get distinct cards, or wait for one."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys

import pytest
import torch

from zoomattn import gpus
from zoomattn.placement import Placement

LISTING = "0, GPU-aaaa-0000\n1, GPU-bbbb-1111\n"
# A job process: claims its cards as run_stage does, prints CUDA_VISIBLE_DEVICES, holds the cards
# until its stdin closes.
CLAIMER = (
    "import json, logging, os, sys; logging.basicConfig(level=logging.INFO); "
    "from zoomattn import gpus; "
    "ids = gpus.claim_for_spec(json.loads(sys.argv[1])); "
    "assert ','.join(ids) == os.environ['CUDA_VISIBLE_DEVICES']; "
    "print(os.environ['CUDA_VISIBLE_DEVICES'], flush=True); sys.stdin.read()"
)


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A pretend machine with the cards of ``LISTING`` (or another listing), locks in tmp_path.
    On a machine with a GPU, this test process may already have initialised CUDA (the gpu lane;
    bitsandbytes asks each card for its compute capability at import): the pretend machine's
    process has not."""
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv(gpus.ENV_LOCK_DIR, str(tmp_path / "locks"))

    def with_cards(listing: str = LISTING) -> None:
        (tmp_path / "listing").write_text(listing)
        monkeypatch.setenv(gpus.ENV_LISTING, str(tmp_path / "listing"))

    with_cards()
    return with_cards


@pytest.fixture
def claimer():
    """Start a job process that claims ``n`` cards; any still running at the end are killed."""
    procs = []

    def start(n: int = 1, **env: str) -> subprocess.Popen:
        spec = json.dumps({"device": Placement("cuda", "bfloat16", n).as_spec()})
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", CLAIMER, spec],
                env={**os.environ, **env},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
        return procs[-1]

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def line(stream, timeout: float = 5.0) -> str | None:
    """The next line of a claimer's stdout or stderr, or None if none comes in ``timeout`` s."""
    ready, _, _ = select.select([stream], [], [], timeout)
    return stream.readline().strip() if ready else None


def done(proc: subprocess.Popen) -> None:
    proc.stdin.close()
    assert proc.wait(timeout=5) == 0, proc.stderr.read()


def test_concurrent_jobs_get_distinct_cards(machine, claimer):
    a, b = claimer(), claimer()
    assert {line(a.stdout), line(b.stdout)} == {"GPU-aaaa-0000", "GPU-bbbb-1111"}
    done(a)
    done(b)


def test_with_every_card_taken_a_job_waits_for_the_next_one_freed(machine, claimer):
    a, b = claimer(), claimer()
    held = {line(a.stdout): a, line(b.stdout): b}
    c = claimer()
    assert "waiting for a free GPU" in line(c.stderr)
    assert line(c.stdout, timeout=1.0) is None  # still waiting
    first = sorted(held)[0]
    done(held[first])
    assert line(c.stdout) == first
    done(c)
    assert "waiting" not in c.stderr.read(), "it says so once"


def test_a_killed_job_frees_its_card(machine, claimer):
    machine("0, GPU-aaaa-0000\n")
    a = claimer()
    assert line(a.stdout) == "GPU-aaaa-0000"
    b = claimer()
    assert "waiting for a free GPU" in line(b.stderr)
    a.kill()  # SIGKILL: the lock goes with the process
    a.wait()
    assert line(b.stdout) == "GPU-aaaa-0000"
    done(b)


def test_a_two_card_job_takes_two_and_holds_none_while_waiting(machine, claimer):
    a = claimer()
    assert line(a.stdout) in ("GPU-aaaa-0000", "GPU-bbbb-1111")
    both = claimer(2)
    assert "waiting for a free GPU" in line(both.stderr)
    b = claimer()
    assert line(b.stdout) is not None, "the waiting 2-card job holds the free card"
    done(a)
    done(b)
    assert line(both.stdout) == "GPU-aaaa-0000,GPU-bbbb-1111"


@pytest.mark.parametrize(
    "visible, card",
    [("1", "GPU-bbbb-1111"), ("GPU-aaaa-0000", "GPU-aaaa-0000"), ("GPU-bbbb", "GPU-bbbb-1111")],
)
def test_the_parents_cuda_visible_devices_narrows_the_cards(machine, claimer, visible, card):
    a = claimer(CUDA_VISIBLE_DEVICES=visible)
    assert line(a.stdout) == card
    b = claimer(CUDA_VISIBLE_DEVICES=visible)
    assert "waiting for a free GPU" in line(b.stderr)  # the other card is not its to take
    done(a)
    assert line(b.stdout) == card
    done(b)


def test_under_slurm_the_jobs_cards_are_its_own(machine, monkeypatch, tmp_path):
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert gpus.claim(1) == ["2", "3"]
    assert not (tmp_path / "locks").exists()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2,3"


def test_without_cards_a_cuda_job_fails_and_says_why(machine, monkeypatch):
    machine("")
    with pytest.raises(RuntimeError, match="no GPU: nvidia-smi lists none.*planned for CUDA"):
        gpus.claim(1)
    machine()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    with pytest.raises(RuntimeError, match="none among CUDA_VISIBLE_DEVICES=7"):
        gpus.claim(1)
    monkeypatch.delenv(gpus.ENV_LISTING)
    monkeypatch.setenv("PATH", "")
    with pytest.raises(RuntimeError, match="nvidia-smi is not on PATH.*planned for CUDA"):
        gpus.claim(1)


def test_a_claim_after_cuda_was_initialised_fails_since_cuda_reads_the_cards_once(
    machine, monkeypatch
):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(RuntimeError, match="claim GPUs before CUDA is initialised"):
        gpus.claim(1)
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_a_job_wanting_more_cards_than_the_machine_has_fails_rather_than_waits(machine):
    with pytest.raises(RuntimeError, match="needs 3 GPUs.*2 to give"):
        gpus.claim(3)


def test_a_job_not_planned_for_cuda_claims_nothing(machine):
    assert gpus.claim_for_spec({}) is None
    assert gpus.claim_for_spec({"device": Placement("cpu", "float32", 0).as_spec()}) is None
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


# A multi-process fine-tune's job process: claims the cards of its spec, then becomes "torchrun"
# (an exec, as distributed.relaunch_under_torchrun does) whose process claims as a rank would.
TORCHRUN_CLAIMER = (
    "import json, os, sys; from zoomattn import gpus; "
    "gpus.claim_for_spec(json.loads(sys.argv[1])); "
    "os.environ.update(RANK='0', WORLD_SIZE='2', LOCAL_RANK='0'); "
    "os.execv(sys.executable, [sys.executable, '-c', sys.argv[2], sys.argv[1]])"
)


def test_a_fine_tune_of_two_processes_holds_two_cards_through_the_exec_into_torchrun(machine):
    spec = {"device": Placement("cuda", "bfloat16", 1).as_spec(), "finetune": {"processes": 2}}
    job = subprocess.Popen(
        [sys.executable, "-c", TORCHRUN_CLAIMER, json.dumps(spec), CLAIMER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # the rank claims nothing more: it has the launcher's two cards
        assert line(job.stdout) == "GPU-aaaa-0000,GPU-bbbb-1111"
        with pytest.raises(RuntimeError, match="needs 3 GPUs"):
            gpus.claim(3)
        other = subprocess.Popen(
            [sys.executable, "-c", CLAIMER, json.dumps({"device": spec["device"]})],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert "waiting for a free GPU" in line(other.stderr), "the exec kept both locks"
        done(job)
        assert line(other.stdout) in ("GPU-aaaa-0000", "GPU-bbbb-1111")
        done(other)
    finally:
        job.kill()
