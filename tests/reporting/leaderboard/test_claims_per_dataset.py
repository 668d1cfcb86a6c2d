"""A claim's side under rectification's per_dataset scheme: each set is answered by the model
trained on the training set its benchmark names, never by another set's model of the same run."""

from zoomattn.reporting.leaderboard.claims import _side


def test_a_per_dataset_cell_answers_only_for_the_benchmark_its_set_serves():
    cells = {
        f"rectification/qlora-reverse-{d}_s0": {
            "run": "qlora",
            "seed": 0,
            "placement": "reverse",
            "dataset": d,
        }
        for d in ("dpr_nq", "2wiki")
    }
    served = {"nq": "dpr_nq", "2wiki": "2wiki"}
    side = _side(cells, [("nq", "reverse"), ("2wiki", "reverse")], True, served)
    assert side.runs == (
        {
            ("nq", "reverse"): "rectification/qlora-reverse-dpr_nq_s0",
            ("2wiki", "reverse"): "rectification/qlora-reverse-2wiki_s0",
        },
    )
