import numpy as np
import pytest
from transformers import AutoModelForCausalLM

from zoomattn.data.tasks import single_doc
from zoomattn.evaluation.rectification import score_margins


def test_score_margins_cover_every_example_layer_and_head_and_xi_auto_is_half_the_median(
    sampler, base_dir, tokenizer
):
    model = AutoModelForCausalLM.from_pretrained(base_dir, attn_implementation="zoomattn").eval()
    vanilla = single_doc(sampler, 0.8)
    out = score_margins(model, tokenizer, [vanilla, {**vanilla, "placement": "reverse"}])
    margins = np.array(out["margins"])
    assert margins.shape == (2, 4, 4) and (margins > 0).all()  # SMALL_MODEL: 4 layers, 4 heads
    assert out["median"] == pytest.approx(float(np.median(margins)), abs=1e-3)
    assert out["xi_auto"] == pytest.approx(out["median"] / 2, abs=1e-3)
