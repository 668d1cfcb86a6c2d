import yaml

from zoomattn.config import ROOT


def _lock() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.lower()] = version
    return pins


def test_every_dependency_is_pinned_exactly_and_torch_is_2_13_0():
    lines = [
        x
        for x in (ROOT / "requirements.in").read_text().splitlines()
        if x.strip() and not x.startswith("#")
    ]
    assert all("==" in x for x in lines), [x for x in lines if "==" not in x]
    assert _lock()["torch"] == "2.13.0"


def test_conda_envs_use_the_locked_versions():
    lock = _lock()
    for env in sorted((ROOT / "envs").glob("*.yaml")):
        pip = next(
            d["pip"] for d in yaml.safe_load(env.read_text())["dependencies"] if isinstance(d, dict)
        )
        for spec in pip:
            if "==" in spec:
                name, version = spec.split("==")
                assert lock[name.lower()] == version, f"{env.name}: {spec}"
