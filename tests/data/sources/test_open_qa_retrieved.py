"""The builders over retrieval-result files (open_qa_retrieved.py): DPR NQ / TriviaQA, ALCE's ASQA
and LKG-RALM, on small fixtures written in each dataset's real format."""

from __future__ import annotations

import gzip
import json
import tarfile

import pytest

from tests.data.sources.open_qa_fixtures import ASQA, HAMLET, NQ, build, ctx, doc, lkg_rows
from zoomattn.data.sources.common import SourceError
from zoomattn.evaluation.metrics import METRICS
from zoomattn.evaluation.official import RULES

# --- DPR retriever results (NQ, TriviaQA) ------------------------------------------------------


def test_dpr_nq_context_is_first_answer_passage_plus_first_three_non_answer_passages(nq_dir):
    records = build("dpr_nq", nq_dir)
    assert [r["id"] for r in records] == ["dpr_nq/test/0", "dpr_nq/test/2", "dpr_nq/test/3"]
    hamlet = records[0]
    expected = {doc(c["title"], c["text"]) for c in (HAMLET[1], HAMLET[0], HAMLET[2], HAMLET[4])}
    assert set(hamlet["documents"]) == expected and len(hamlet["documents"]) == 4
    assert [hamlet["documents"][g] for g in hamlet["golden"]] == [doc("Hamlet", HAMLET[1]["text"])]
    assert hamlet["answers"] == ["William Shakespeare", "Shakespeare"]
    assert hamlet["family"] == "open" and hamlet["noise_ratio"] == 0.75
    assert hamlet["question"] == "who wrote hamlet" and hamlet["instruction"] == ""


def test_dpr_nq_matches_answer_tokens_when_the_file_has_no_has_answer_flag(nq_dir):
    paris = build("dpr_nq", nq_dir)[1]
    assert [paris["documents"][g] for g in paris["golden"]] == [
        doc("France", "Its capital is PARIS.")
    ]
    assert len(paris["documents"]) == 3  # only two passages without the answer exist


@pytest.mark.parametrize(("ratio", "n_noise"), [(0.0, 0), (0.5, 1), (0.75, 3), (0.8, 4), (0.9, 4)])
def test_dpr_nq_noise_ratio_sets_the_noise_count_capped_by_the_available_passages(
    nq_dir, ratio, n_noise
):
    hamlet = build("dpr_nq", nq_dir, noise_ratio=ratio)[0]
    assert len(hamlet["documents"]) == 1 + n_noise and len(hamlet["golden"]) == 1
    assert hamlet["noise_ratio"] == pytest.approx(n_noise / (1 + n_noise))


def test_dpr_nq_uniform_noise_draws_a_ratio_per_record_below_max_noise(nq_dir):
    records = build("dpr_nq", nq_dir, noise_ratio="uniform", max_noise=0.5)
    assert all(len(r["documents"]) <= 2 for r in records)
    assert records == build("dpr_nq", nq_dir, noise_ratio="uniform", max_noise=0.5)


def test_dpr_nq_top_k_keeps_the_first_k_passages_in_rank_order_with_every_answer_holder(nq_dir):
    records = build("dpr_nq", nq_dir, top_k=4)
    assert len(records) == 4  # the question without an answer passage is kept
    hamlet, adams = records[0], records[1]
    assert hamlet["documents"] == [doc(c["title"], c["text"]) for c in HAMLET[:4]]
    assert hamlet["golden"] == [1, 3] and hamlet["noise_ratio"] == 0.5
    assert adams["golden"] == [] and 0.99 < adams["noise_ratio"] < 1.0


def test_dpr_nq_is_deterministic_and_limit_samples_in_source_order(nq_dir):
    assert build("dpr_nq", nq_dir, seed=3) == build("dpr_nq", nq_dir, seed=3)
    limited = build("dpr_nq", nq_dir, limit=2)
    assert len(limited) == 2
    ids = [r["id"] for r in limited]
    assert ids == sorted(ids, key=lambda i: int(i.rsplit("/", 1)[1]))
    orders = {tuple(build("dpr_nq", nq_dir, seed=s)[0]["documents"]) for s in range(8)}
    assert len(orders) > 1  # the shuffle follows the seed


def test_dpr_triviaqa_reads_gzipped_results_with_hasanswer_and_target_first(tmp_path):
    rows = [
        {
            "question": "Which planet has rings?",
            "target": "Saturn",
            "answers": ["saturn", "Saturn"],
            "ctxs": [
                ctx("Rings", "Saturn has rings.", hasanswer=True),
                ctx("Venus", "Venus is hot.", hasanswer=False),
            ],
        }
    ]
    with gzip.open(tmp_path / "trivia-dev.json.gz", "wt") as f:
        json.dump(rows, f)
    (record,) = build("dpr_triviaqa", tmp_path, split="dev")
    assert record["answers"] == ["Saturn", "saturn"] and len(record["documents"]) == 2
    assert record["documents"][record["golden"][0]] == doc("Rings", "Saturn has rings.")


def test_dpr_builders_reject_unknown_and_conflicting_options(nq_dir):
    with pytest.raises(SourceError, match="'dpr_nq'.*unknown option 'query_position'"):
        build("dpr_nq", nq_dir, query_position="ahead")
    with pytest.raises(SourceError, match="exclude each other"):
        build("dpr_nq", nq_dir, distractors=2, top_k=5)
    with pytest.raises(SourceError, match="'noise_ratio'"):
        build("dpr_nq", nq_dir, noise_ratio=1.0)


def test_dpr_nq_missing_file_names_the_expected_file(tmp_path):
    with pytest.raises(SourceError, match="file missing.*nq-test.json"):
        build("dpr_nq", tmp_path)


def test_dpr_nq_missing_or_mistyped_field_names_file_record_and_field(tmp_path):
    rows = [NQ[0], {"answers": ["x"], "ctxs": []}]
    (tmp_path / "nq-test.json").write_text(json.dumps(rows))
    with pytest.raises(SourceError, match=r"nq-test\.json\[1\]: field 'question' missing"):
        build("dpr_nq", tmp_path)
    rows[1] = {
        "question": "q",
        "answers": ["x"],
        "ctxs": [ctx("T", "t"), {"title": "U", "text": 7}],
    }
    (tmp_path / "nq-test.json").write_text(json.dumps(rows))
    with pytest.raises(SourceError, match=r"nq-test\.json\[1\] ctxs\[1\]: field 'text' is int"):
        build("dpr_nq", tmp_path)


# --- ASQA (ALCE) -------------------------------------------------------------------------------


def test_asqa_gold_is_the_first_doc_per_qa_pair_and_noise_the_first_docs_without_answers(tmp_path):
    (tmp_path / "asqa_eval_dpr_top100.json").write_text(json.dumps(ASQA))
    goals, bridge = build("asqa", tmp_path)
    assert goals["id"] == "asqa/eval/-123"
    golden = {goals["documents"][g] for g in goals["golden"]}
    assert golden == {
        doc("Ronaldo", ASQA[0]["docs"][1]["text"]),
        doc("Daei", "Ali Daei scored 109 goals."),
    }
    noise = set(goals["documents"]) - golden
    assert noise == {doc(d["title"], d["text"]) for d in (ASQA[0]["docs"][i] for i in (0, 4, 5))}
    assert goals["answers"] == [ASQA[0]["answer"], "Ali Daei", "Cristiano Ronaldo", "Ronaldo"]
    # answers_found marks a doc as gold even where the string does not match
    assert [bridge["documents"][g] for g in bridge["golden"]] == [
        doc("Bridge", "It opened in the thirties.")
    ]


def test_asqa_keeps_each_qa_pair_s_short_answers_as_a_group(tmp_path):
    (tmp_path / "asqa_eval_dpr_top100.json").write_text(json.dumps(ASQA))
    goals, _ = build("asqa", tmp_path)
    assert goals["answer_groups"] == [["Ali Daei"], ["Cristiano Ronaldo", "Ronaldo"]]
    # ALCE's STR-EM counts both pairs found (one alias each); the flat list misses the long
    # answer and "Cristiano Ronaldo"
    prediction = "Ali Daei, then Ronaldo."
    assert RULES["alce_str_em"].score(prediction, goals) == 1.0
    assert METRICS["str_em"](prediction, goals) == 0.5


def test_dpr_records_have_no_answer_groups(nq_dir):
    assert all(r["answer_groups"] == [] for r in build("dpr_nq", nq_dir))


def test_asqa_reads_the_file_inside_alce_data_tar(tmp_path):
    member = tmp_path / "asqa_eval_dpr_top100.json"
    member.write_text(json.dumps(ASQA))
    packed = tmp_path / "packed"
    packed.mkdir()
    with tarfile.open(packed / "ALCE-data.tar", "w") as tar:
        tar.add(member, arcname="ALCE-data/asqa_eval_dpr_top100.json")
    assert build("asqa", packed) == build("asqa", tmp_path)


def test_asqa_short_answers_of_wrong_type_name_the_qa_pair(tmp_path):
    rows = json.loads(json.dumps(ASQA))
    rows[1]["qa_pairs"][0]["short_answers"] = "1932"
    (tmp_path / "asqa_eval_dpr_top100.json").write_text(json.dumps(rows))
    with pytest.raises(
        SourceError, match=r"asqa_eval_dpr_top100\.json\[1\] qa_pairs\[0\]: field 'short_answers'"
    ):
        build("asqa", tmp_path)


# --- LKG-RALM retrieval results ----------------------------------------------------------------


def test_lkg_nq_keeps_the_first_passages_in_rank_order_with_answer_holders_golden(lkg_dir):
    hamlet, planet, paris = build("lkg_nq", lkg_dir, passages=3)
    assert hamlet["documents"] == [doc(c["title"], c["text"]) for c in HAMLET[:3]]
    assert hamlet["golden"] == [1] and planet["golden"] == [0] and paris["golden"] == [1]
    assert hamlet["id"] == "lkg_nq/test/0" and hamlet["noise_ratio"] == pytest.approx(2 / 3)
    assert len(build("lkg_nq", lkg_dir)[0]["documents"]) == 6  # default 50, capped by the file
    assert build("lkg_nq", lkg_dir, passages=0)[0]["documents"] == []


@pytest.mark.parametrize(("share", "replaced"), [(0.0, 0), (0.5, 2), (1.0, 3)])
def test_lkg_irrelevant_share_replaces_passages_by_other_questions_passages(
    lkg_dir, share, replaced
):
    records = build("lkg_nq", lkg_dir, passages=3, irrelevant_share=share)
    originals = [[doc(c["title"], c["text"]) for c in r["ctxs"]] for r in lkg_rows()]
    for i, record in enumerate(records):
        own = originals[i]
        foreign = [d for d in record["documents"] if d not in own]
        assert len(foreign) == replaced and len(record["documents"]) == 3
        others = {d for j, docs in enumerate(originals) if j != i for d in docs}
        assert set(foreign) <= others
        assert all(record["documents"][g] in own for g in record["golden"])
    if share == 1.0:
        assert all(r["golden"] == [] and 0.99 < r["noise_ratio"] < 1.0 for r in records)
    assert records == build("lkg_nq", lkg_dir, passages=3, irrelevant_share=share)


def test_lkg_popqa_decodes_possible_answers_from_its_json_string(tmp_path):
    row = {
        "id": 4222362,
        "subj": "George Rankin",
        "prop": "occupation",
        "obj": "politician",
        "question": "What is George Rankin's occupation?",
        "possible_answers": json.dumps(["politician", "political leader"]),
        "ctxs": [ctx("George Rankin", "He was an Australian political leader.", score="1.2")],
    }
    (tmp_path / "popqa_longtail_w_gs.jsonl").write_text(json.dumps(row) + "\n")
    (record,) = build("lkg_popqa", tmp_path)
    assert record["answers"] == ["politician", "political leader"] and record["golden"] == [0]
    row["possible_answers"] = "[politician"
    (tmp_path / "popqa_longtail_w_gs.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(
        SourceError, match=r"popqa_longtail_w_gs\.jsonl:1: field 'possible_answers'"
    ):
        build("lkg_popqa", tmp_path)


def test_lkg_malformed_line_names_the_file_and_line(lkg_dir):
    lines = (lkg_dir / "nq-test.jsonl").read_text().splitlines()
    (lkg_dir / "nq-test.jsonl").write_text("\n".join([lines[0], "{not json", lines[2]]))
    with pytest.raises(SourceError, match=r"nq-test\.jsonl:2: not valid JSON"):
        build("lkg_nq", lkg_dir)


def test_lkg_options_are_checked(lkg_dir):
    with pytest.raises(SourceError, match="'lkg_nq'.*unknown option 'noise_ratio'"):
        build("lkg_nq", lkg_dir, noise_ratio=0.5)
    with pytest.raises(SourceError, match="'irrelevant_share'"):
        build("lkg_nq", lkg_dir, irrelevant_share=1.5)
    (lkg_dir / "one").mkdir()
    (lkg_dir / "one" / "nq-test.jsonl").write_text(json.dumps(lkg_rows()[0]))
    with pytest.raises(SourceError, match="record 0.*'irrelevant_share'"):
        build("lkg_nq", lkg_dir / "one", irrelevant_share=0.5)
