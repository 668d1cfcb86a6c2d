import yaml
from transformers import AutoTokenizer

from zoomattn.config import ROOT, load_config
from zoomattn.data.build import build_eval, build_train, build_world, load_split
from zoomattn.io import read_json


def _smoke_cfg():
    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    raw["preset"] = "smoke"
    return load_config(raw)


def test_data_stages_write_manifests_and_are_reproducible(tmp_path):
    cfg = _smoke_cfg()
    build_world(cfg, tmp_path / "world")
    for run in ("a", "b"):
        build_train(cfg, tmp_path / "world", tmp_path / run / "train")
        build_eval(cfg, tmp_path / "world", "coqa_like", 0.9, tmp_path / run / "eval")
    for split in ("train", "eval"):
        a, b = (
            read_json(tmp_path / "a" / split / "manifest.json"),
            read_json(tmp_path / "b" / split / "manifest.json"),
        )
        assert a == b and a["examples"] > 0 and len(a["sha256"]) == 64
    recs = load_split(tmp_path / "a" / "eval")
    assert len(recs) == cfg["data"]["n_eval"] and all(len(r["documents"]) == 10 for r in recs)
    tok = AutoTokenizer.from_pretrained(tmp_path / "world" / "tokenizer")
    assert tok.decode(tok("the city of x is new york .")["input_ids"]).endswith("new york .")


def test_eval_sets_do_not_depend_on_the_other_benchmarks(tmp_path):
    cfg = _smoke_cfg()
    build_world(cfg, tmp_path / "world")
    build_eval(cfg, tmp_path / "world", "coqa_like", 0.0, tmp_path / "x")
    del cfg["benchmarks"]["faitheval_like"]
    build_eval(cfg, tmp_path / "world", "coqa_like", 0.0, tmp_path / "y")
    assert (tmp_path / "x" / "records.jsonl").read_bytes() == (
        tmp_path / "y" / "records.jsonl"
    ).read_bytes()


def test_a_failed_build_leaves_no_partial_output(tmp_path):
    cfg = _smoke_cfg()
    cfg["data"]["train_mix"] = {"bogus": 1.0}
    build_world(cfg, tmp_path / "world")
    try:
        build_train(cfg, tmp_path / "world", tmp_path / "train")
    except ValueError as err:
        assert "data.train_mix" in str(err)
    assert not (tmp_path / "train").exists()
