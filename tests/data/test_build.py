import json

import pytest
import yaml
from transformers import AutoTokenizer

from zoomattn.config import ROOT, load_config
from zoomattn.data.build import (
    build_distractor_set,
    build_eval,
    build_train,
    build_world,
    load_split,
)
from zoomattn.io import read_json
from zoomattn.specs import Specs


def _smoke_specs():
    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    raw["preset"] = "smoke"
    return Specs(load_config(raw))


def test_data_stages_write_manifests_and_are_reproducible(tmp_path):
    specs = _smoke_specs()
    build_world(specs.world(), tmp_path / "world")
    for run in ("a", "b"):
        build_train(specs.train_data("train"), tmp_path / "world", tmp_path / run / "train")
        spec = specs.eval_data("coqa_like", "r0.9")
        build_eval(spec, tmp_path / "world", "coqa_like", 0.9, tmp_path / run / "eval")
    for split in ("train", "eval"):
        a, b = (
            read_json(tmp_path / "a" / split / "manifest.json"),
            read_json(tmp_path / "b" / split / "manifest.json"),
        )
        assert a == b and a["examples"] > 0 and len(a["sha256"]) == 64
    recs = load_split(tmp_path / "a" / "eval")
    assert len(recs) == specs.cfg["data"]["n_eval"] and all(len(r["documents"]) == 10 for r in recs)
    tok = AutoTokenizer.from_pretrained(tmp_path / "world" / "tokenizer")
    assert tok.decode(tok("the city of x is new york .")["input_ids"]).endswith("new york .")


def test_eval_sets_do_not_depend_on_the_other_benchmarks(tmp_path):
    specs = _smoke_specs()
    build_world(specs.world(), tmp_path / "world")
    spec = specs.eval_data("coqa_like", "r0")
    every = {**spec, "benchmarks": specs.cfg["studies"]["opamp"]["benchmarks"]}
    assert len(every["benchmarks"]) > len(spec["benchmarks"])
    build_eval(every, tmp_path / "world", "coqa_like", 0.0, tmp_path / "x")
    build_eval(spec, tmp_path / "world", "coqa_like", 0.0, tmp_path / "y")
    assert (tmp_path / "x" / "records.jsonl").read_bytes() == (
        tmp_path / "y" / "records.jsonl"
    ).read_bytes()


def test_a_failed_build_leaves_no_partial_output(tmp_path):
    specs = _smoke_specs()
    spec = specs.train_data("train")
    spec["data"] = {**spec["data"], "train_mix": {"bogus": 1.0}}
    build_world(specs.world(), tmp_path / "world")
    try:
        build_train(spec, tmp_path / "world", tmp_path / "train")
    except ValueError as err:
        assert "data.train_mix" in str(err)
    assert not (tmp_path / "train").exists()


# --- LKG-RALM's robustness sets (build_distractor_set with passages / irrelevant) -----------------


def _lkg_spec(**split):
    return {
        "world_seed": 7,
        "study": "lkg",
        "placement": "vanilla",
        "benchmark": "nq_like",
        "spec": {"family": "single"},
        "data": {"n_eval": 8},
        "distractors": 3,
        **split,
    }


def _built(spec, world_dir, out):
    manifest = build_distractor_set(spec, world_dir, out)
    return manifest, load_split(out)


def test_a_retrieval_split_holds_its_passages_with_the_share_replaced(tmp_path, world):
    world.save(tmp_path / "world.json")
    manifest, recs = _built(_lkg_spec(passages=10, irrelevant=0.3), tmp_path, tmp_path / "a")
    assert manifest["passages"] == 10 and manifest["irrelevant"] == 0.3
    assert manifest["examples"] == 8 and manifest["benchmark"] == "nq_like"
    assert all(len(r["documents"]) == 10 and r["placement"] == "vanilla" for r in recs)
    for rec in recs:  # the golden index points at the asked fact, wherever it lies (or is gone)
        words = rec["question"].split()
        golden = f"the {words[3]} of {words[-2]} is {rec['answers'][0]} ."
        assert rec["golden"] == [i for i, d in enumerate(rec["documents"]) if d == golden]
    again, _ = _built(_lkg_spec(passages=10, irrelevant=0.3), tmp_path, tmp_path / "b")
    assert again == manifest


def test_each_retrieval_split_has_its_own_seed(tmp_path, world):
    world.save(tmp_path / "world.json")
    splits = [{}, {"passages": 10}, {"passages": 10, "irrelevant": 0.5}, {"passages": 20}]
    manifests = [
        _built(_lkg_spec(**s), tmp_path, tmp_path / f"s{i}")[0] for i, s in enumerate(splits)
    ]
    assert len({m["seed"] for m in manifests}) == 4
    assert len({m["sha256"] for m in manifests}) == 4
    assert "passages" not in manifests[0]  # the distractor sets are unchanged
    assert manifests[1]["irrelevant"] == 0.0
    _, closed = _built(_lkg_spec(passages=0), tmp_path, tmp_path / "closed")
    assert all(r["documents"] == [] and r["golden"] == [] for r in closed)


def test_a_real_retrieval_split_passes_passages_and_share_to_the_lkg_builder(tmp_path):
    from tests.data.sources.open_qa_fixtures import doc, lkg_rows

    rows = lkg_rows()
    (tmp_path / "nq-test.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    spec = _lkg_spec(passages=3, irrelevant=0.5)
    spec["spec"] = {"source": "lkg_nq", "options": {"path": str(tmp_path)}}
    manifest, recs = _built(spec, None, tmp_path / "out")
    assert manifest["passages"] == 3 and manifest["irrelevant"] == 0.5 and len(recs) == 3
    for rec in recs:
        (own,) = [
            [doc(c["title"], c["text"]) for c in r["ctxs"]]
            for r in rows
            if r["question"] == rec["question"]
        ]
        assert len(rec["documents"]) == 3
        assert sum(d not in own for d in rec["documents"]) == 2  # round(0.5 * 3)


def test_passages_need_an_lkg_builder_and_an_eval_set(tmp_path):
    spec = _lkg_spec(passages=3)
    spec["spec"] = {"source": "dpr_nq", "options": {"path": str(tmp_path)}}
    with pytest.raises(ValueError, match="benchmarks.nq_like: 'passages' needs an LKG-RALM"):
        build_distractor_set(spec, None, tmp_path / "out")
    train = {k: v for k, v in _lkg_spec(passages=3).items() if k != "benchmark"}
    with pytest.raises(ValueError, match="eval sets only"):
        build_distractor_set(train, None, tmp_path / "out")
    with pytest.raises(ValueError, match="integer >= 0"):
        build_distractor_set(_lkg_spec(passages=2.5), tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()
