import os
import random

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")  # as the CLI does: see zoomattn/__main__.py
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

import pytest  # noqa: E402
import torch  # noqa: E402

if not torch.cuda.is_available():  # Triton kernels run in its interpreter (read at definition)
    os.environ.setdefault("TRITON_INTERPRET", "1")

from zoomattn.data.tokenizer import build_tokenizer  # noqa: E402
from zoomattn.data.world import FactSampler, World  # noqa: E402

SMALL_MODEL = dict(hidden=32, layers=4, heads=4, kv_heads=2, intermediate=64, max_positions=256)


@pytest.fixture(scope="session")
def world() -> World:
    return World.generate(seed=7, n_entities=60, n_famous=5)


@pytest.fixture
def sampler(world) -> FactSampler:
    return FactSampler(world, random.Random(0))


@pytest.fixture(scope="session")
def tokenizer(world):
    return build_tokenizer(world.words())


@pytest.fixture(scope="session")
def base_dir(tmp_path_factory, tokenizer):
    """A small random Llama saved with save_pretrained, as the pretrain stage saves ours."""
    from transformers import LlamaForCausalLM

    from zoomattn.modeling.pretrain import llama_config

    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("base")
    model = LlamaForCausalLM(llama_config(len(tokenizer), SMALL_MODEL, tokenizer))
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def train_dir(tmp_path_factory, world):
    """A small fine-tuning split (32 single- and two-hop records) written as the data job does."""
    from zoomattn.data.build import write_split
    from zoomattn.data.tasks import training_mix

    records = training_mix(world, {"single": 1.0, "multihop": 0.5}, 32, 0.9, 4, seed=3)
    out = tmp_path_factory.mktemp("train") / "train"
    write_split(records, out, {})
    return out


def pytest_collection_modifyitems(config, items):
    """The `gpu` lane runs wherever CUDA is visible and is skipped, saying so, elsewhere."""
    if torch.cuda.is_available() or os.environ.get("ZOOMATTN_GPU_LANE_DEVICE") == "cpu":
        return
    skip = pytest.mark.skip(reason="gpu lane: no CUDA device visible (CI runs on CPU)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def plain_fused_as_on_cuda(monkeypatch):
    """Dispatch as on CUDA (``kernels.choose``'s own rule, the device taken for CUDA, whose flash
    kernel is taken to run fp32 too, as the CPU's does) under ``attention_kernels: {plain:
    fused}``; the setting and the record of what ran restored after the test."""
    from zoomattn.attention import kernels
    from zoomattn.attention import math as attention_math

    choose, cuda = kernels.choose, torch.device("cuda")
    monkeypatch.setattr(kernels, "choose", lambda m, device, *a: choose(m, cuda, *a))
    monkeypatch.setattr(
        attention_math, "FLASH_DTYPES", (*attention_math.FLASH_DTYPES, torch.float32)
    )
    with kernels.using({"plain": "fused"}):
        yield
