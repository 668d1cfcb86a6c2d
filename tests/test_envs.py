import os
import re
import subprocess
import sys

import pytest
import torch
import yaml

from zoomattn.config import ROOT


def _lock() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.lower()] = version
    return pins


def _pins(path) -> list[str]:
    """A requirements file's lines, comments and blank lines left out."""
    return [x for x in path.read_text().splitlines() if x.strip() and not x.startswith("#")]


def test_every_dependency_is_pinned_exactly_and_torch_is_2_13_0():
    lines = _pins(ROOT / "requirements.in")
    assert all("==" in x for x in lines), [x for x in lines if "==" not in x]
    assert _lock()["torch"] == "2.13.0"


def _env_pins(env) -> dict[str, str]:
    """The exact pins of a conda env's pip section."""
    dependencies = yaml.safe_load(env.read_text())["dependencies"]
    pip = next(d["pip"] for d in dependencies if isinstance(d, dict))
    return dict(spec.lower().split("==") for spec in pip if "==" in spec)


def test_conda_envs_use_the_locked_versions():
    lock = _lock()
    for env in sorted((ROOT / "envs").glob("*.yaml")):
        for name, version in _env_pins(env).items():
            assert lock[name] == version, f"{env.name}: {name}=={version}"


# What a CUDA build of torch 2.13.0 pins itself (the Requires-Dist of PyPI's Linux wheel, which
# bin/check-gpu-install resolves). The CPU build installed here pins none of it, so no install on
# this machine would show a conflict; on every GPU machine it makes the install fail.
PINNED_BY_CUDA_TORCH = {"triton": "3.7.1"}


def test_no_install_file_pins_another_version_of_what_cuda_torch_pins():
    lock = _lock()
    for name, version in PINNED_BY_CUDA_TORCH.items():
        assert lock.get(name, version) == version, f"requirements.lock: {name}=={lock[name]}"
        for env in sorted((ROOT / "envs").glob("*.yaml")):
            assert _env_pins(env).get(name, version) == version, env.name


def test_the_cpu_only_lock_pins_triton_exactly_for_the_interpreter():
    assert _pins(ROOT / "requirements-cpu.lock") == ["triton==3.6.0"]


def _setup_cpu_build_check() -> str:
    """The interpreter code bin/setup runs to decide whether to install requirements-cpu.lock."""
    found = re.search(
        r"if \.venv/bin/python -c '([^']+)'; then\n"
        r"\s+\S+ -m pip install .* -r requirements-cpu\.lock\n",
        (ROOT / "bin/setup").read_text(),
    )
    assert found, "bin/setup installs requirements-cpu.lock under no check of torch's build"
    return found.group(1)


@pytest.mark.parametrize(
    ("cuda", "hip", "installs"),
    [(None, None, True), ("13.0", None, False), (None, "7.1", False)],
    ids=["cpu build", "cuda build", "rocm build"],
)
def test_setup_installs_the_cpu_only_lock_beside_a_cpu_build_of_torch_only(
    tmp_path, cuda, hip, installs
):
    (tmp_path / "torch.py").write_text(f"class version:\n    cuda = {cuda!r}\n    hip = {hip!r}\n")
    check = subprocess.run(
        [sys.executable, "-c", _setup_cpu_build_check()],
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert check.returncode == (0 if installs else 1), check.stderr


def test_this_machines_torch_is_the_cpu_build_that_the_check_sends_to_the_cpu_only_lock():
    check = subprocess.run([sys.executable, "-c", _setup_cpu_build_check()], capture_output=True)
    assert (check.returncode == 0) == (torch.version.cuda is None and torch.version.hip is None)
