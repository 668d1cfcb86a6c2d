import numpy as np
from transformers import AutoModelForCausalLM

from zoomattn.data.tasks import single_doc
from zoomattn.evaluation.attention_share import document_shares, document_spans, golden_attention


def test_document_spans_cover_exactly_each_documents_tokens(tokenizer, sampler):
    rec = single_doc(sampler, 0.8)
    ids, spans = document_spans(tokenizer, rec)
    for (a, b), doc in zip(spans, rec["documents"], strict=True):
        assert tokenizer.decode(ids[a:b]) == doc


def test_shares_sum_to_one_and_summary_is_per_position(base_dir, tokenizer, sampler):
    model = AutoModelForCausalLM.from_pretrained(base_dir, attn_implementation="zoomattn").eval()
    recs = [single_doc(sampler, 0.8) for _ in range(12)]
    assert np.isclose(document_shares(model, tokenizer, recs[0]).sum(), 1.0)
    summary = golden_attention(model, tokenizer, recs)
    assert summary["n_documents"] == 5 and len(summary["by_position"]) == 5
    assert sum(p["n_golden_here"] for p in summary["by_position"]) == 12
    assert 0.0 < summary["mean_golden_share"] < 1.0
