import pandas as pd

from zoomattn.reporting.opamp import published, tables


def test_lookup_reads_table4_by_noise_table3_at_zero_and_table5_by_subset():
    assert published.lookup("CoQA", "K=10", 0.8, "") == 88.0
    assert published.lookup("CoQA", "QLoRA", 0.5, "") is None  # the paper has no r = 0.5
    assert published.lookup("Qasper", "K=5", 0.0, "") == 41.2
    assert published.lookup("FaithEval", "QLoRA", 0.0, "counterfactual") == 71.6
    assert published.lookup("FaithEval", "QLoRA", 0.0, "") is None
    assert published.lookup("Qasper", "K=∞", 0.0, "") is None  # our row, not the paper's


def test_comparison_covers_real_benchmarks_only_with_delta_ours_minus_paper():
    df = pd.DataFrame(
        [
            {
                "label": "QLoRA",
                "benchmark": "qasper",
                "noise": 0.0,
                "metric": "pm",
                "subset": "",
                "score": 40.0,
                "ci_low": 35.0,
                "ci_high": 45.0,
            },
            {
                "label": "QLoRA",
                "benchmark": "coqa_like",
                "noise": 0.0,
                "metric": "em",
                "subset": "",
                "score": 90.0,
                "ci_low": 85.0,
                "ci_high": 95.0,
            },
        ]
    )
    benchmarks = {
        "qasper": {"source": "longbench", "published": "Qasper", "noise_ratios": [0.0]},
        "coqa_like": {"family": "single", "noise_ratios": [0.0]},
    }
    out = tables.comparison(df, benchmarks)
    assert out.to_dict("records") == [
        {
            "model": "QLoRA",
            "benchmark": "qasper",
            "noise": 0.0,
            "metric": "PM",
            "ours": "40.0 [35.0, 45.0]",
            "published": 38.9,
            "Δ": 1.1,
        }
    ]
