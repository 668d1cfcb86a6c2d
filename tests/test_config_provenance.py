"""The `paper` preset's protocols (paper_text | authors_code) and the provenance table of
docs/papers.md §6, whose "ours" cells must be the effective config's values."""

import copy
import re

import pytest
import yaml

from zoomattn.config import ROOT, ConfigError, load_config, read_configs
from zoomattn.specs import Specs
from zoomattn.studies import Study
from zoomattn.training.finetune import DEFAULTS

PROTOCOLS = ("paper_text", "authors_code")


def _paper(protocol: str | None = None, edit=lambda block: None) -> dict:
    raw = read_configs([ROOT / "config.yaml"], "paper")
    if protocol is not None:
        raw["presets"]["paper"]["protocol"] = protocol
    edit(raw["presets"]["paper"])
    return load_config(raw)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_each_protocol_gives_a_valid_config_that_names_it(protocol):
    cfg = _paper(protocol)
    assert cfg["protocol"] == protocol and "protocols" not in cfg


def test_the_default_protocol_is_the_authors_code_and_differs_from_the_text():
    default, text = _paper(), _paper("paper_text")
    assert default["protocol"] == "authors_code"
    ours = Study.from_config(default, "opamp").finetune
    assert ours["lr_schedule"] == "cosine" and ours["max_grad_norm"] == 0.5
    assert Study.from_config(text, "opamp").finetune["lr_schedule"] == "constant"
    assert default["evaluation"]["base"] == "unquantized"
    assert text["evaluation"]["base"] == "quantized"


def test_a_protocol_reaches_the_finetune_and_evaluate_specs():
    specs = Specs(_paper("authors_code"))
    model = next(m for m in specs.grid.models if specs.grid.models[m].study == "opamp")
    assert specs.finetune(model)["finetune"]["overlong"] == "truncate"
    assert specs._model_job("evaluate", model)["evaluation_base"] == "unquantized"


def test_an_unknown_protocol_is_an_error_naming_the_key_and_the_choices():
    with pytest.raises(
        ConfigError,
        match=r"config\.presets\.paper\.protocol: 'paper'; choose one of "
        r"config\.presets\.paper\.protocols: authors_code, paper_text",
    ):
        _paper("paper")


def test_a_protocol_without_protocols_is_an_error_naming_the_key():
    with pytest.raises(ConfigError, match=r"presets\.paper\.protocol: .*protocols is not set"):
        _paper(edit=lambda block: block.pop("protocols"))


def test_a_bad_value_in_the_protocol_not_chosen_fails_naming_the_overlay():
    def bad(block):
        block["protocols"]["paper_text"] = {"finetune": {"lr_schedule": "linear"}}

    with pytest.raises(ConfigError, match=r"lr_schedule.*protocols\.paper_text merged in"):
        _paper("authors_code", bad)


def test_tiny_finetune_spec_states_the_values_that_were_implicit_before():
    """The new keys of tiny's finetune spec are the trainer's defaults (today's behaviour), and
    nothing else in it changed meaning."""
    cfg = load_config(read_configs([ROOT / "config.yaml"], "tiny"))
    specs = Specs(cfg)
    for model in specs.grid.models:
        ft = specs.finetune(model)["finetune"]
        assert {k: ft[k] for k in DEFAULTS} == DEFAULTS
        assert "max_length" not in ft  # no example is ever left out or cut in tiny
    assert cfg["evaluation"]["base"] == "quantized" and cfg["finetune"]["export_merged"]


# ---- docs/papers.md §6 ---------------------------------------------------------------------

SECTION = re.compile(r"^## §6\. The paper presets' provenance$(.*?)(?=^## |\Z)", re.M | re.S)
STUDY = re.compile(r"^### §6\.\d .*\(`studies\.(\w+)`\)$", re.M)


def provenance_rows() -> list[tuple[str, str, str, str]]:
    """(study, key, ours under paper_text, ours under authors_code) of every row whose key is a
    config key (backticked)."""
    text = SECTION.search((ROOT / "docs" / "papers.md").read_text()).group(1)
    rows = []
    parts = STUDY.split(text)[1:]
    for study, body in zip(parts[::2], parts[1::2], strict=True):
        for line in body.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 6 and cells[0].startswith("`"):
                rows.append((study, cells[0].strip("`"), cells[3], cells[4]))
    return rows


def effective_value(cfg: dict, study: str, key: str):
    head, *rest = key.split(".")
    node = {
        "finetune": lambda: Study.from_config(cfg, study).finetune,
        "methods": lambda: cfg["studies"][study]["methods"],
        "evaluation": lambda: cfg["evaluation"],
    }[head]()
    for part in rest:
        node = node[part]
    return node


def test_the_provenance_table_covers_every_paper_study_with_a_value_set():
    studies = {study for study, *_ in provenance_rows()}
    assert studies == {"opamp", "rectification", "mudaf", "lkg"}
    assert len(provenance_rows()) >= 30


@pytest.mark.parametrize("index,protocol", [(2, "paper_text"), (3, "authors_code")])
def test_the_provenance_table_shows_the_effective_config_of_each_protocol(index, protocol):
    cfg = _paper(protocol)
    wrong = []
    for row in provenance_rows():
        study, key, cell = row[0], row[1], row[index]
        shown = yaml.safe_load(cell.strip("`"))
        actual = effective_value(copy.deepcopy(cfg), study, key)
        if shown != actual:
            wrong.append(f"{study} {key}: the doc says {cell}, {protocol} has {actual!r}")
    assert not wrong, "\n".join(wrong)
