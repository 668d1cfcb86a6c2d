"""tests/bare_image.py hides the GPU image's absent packages, in its process and its children."""

import os
import subprocess
import sys

from tests import bare_image
from zoomattn.config import ROOT

# a child started as a benchmark starts its measuring child: this interpreter, the parent's env
CHILD = "import subprocess as s, sys; sys.exit(s.run([sys.executable, '-c', {code!r}]).returncode)"


def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)} if env is None else env
    return subprocess.run([*bare_image.RUN, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_an_absent_package_is_missing_in_the_process_and_in_its_children():
    for code in ("import mlflow", CHILD.format(code="import mlflow")):
        done = _run("-c", code)
        assert done.returncode != 0 and "No module named 'mlflow'" in done.stderr, (code, done)
    probe = "import importlib.util as u; assert u.find_spec('snakemake') is None"
    assert _run("-c", CHILD.format(code=probe)).returncode == 0


def test_children_import_what_the_image_has():
    done = _run("-c", CHILD.format(code="import torch, transformers, zoomattn.attention.math"))
    assert done.returncode == 0, done.stderr[-2000:]


def test_without_the_switch_a_process_sees_every_package():
    env = {**os.environ, "PYTHONPATH": bare_image.SITE + os.pathsep + str(ROOT)}
    env.pop(bare_image.SWITCH, None)
    done = subprocess.run([sys.executable, "-c", "import mlflow"], env=env, capture_output=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_this_interpreter_has_no_sitecustomize_that_the_bare_images_would_shadow():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = "import importlib.util as u; print(u.find_spec('sitecustomize'))"
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert done.stdout.strip() == "None", done.stdout
