"""Every registered method implements the method protocol, and each hook works when called for real
on the small base model; a method that leaves a hook out is refused when it registers."""

import copy
import dataclasses
import json
import math
import shutil
import subprocess
import sys

import pytest
import torch

from zoomattn.config import ROOT
from zoomattn.data.build import load_split
from zoomattn.methods import METHODS, Method, Objective, ResolveContext, StepBatch, register
from zoomattn.methods.protocol import HERE
from zoomattn.modeling.loading import load_base, load_tokenizer
from zoomattn.training.answer_loss import AnswerLoss
from zoomattn.training.batching import encode_example, pad_batch

HOOKS = ("build", "objective", "prepare_tokenizer", "resolve", "tuning")
LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
HEADS = [[1, 0], [2, 3]]  # valid in the 4-layer, 4-head base of the fixtures
# values a method is exercised with; a method missing here runs on its config's defaults
VALUES = {
    "opamp": {"K": 10, "adapter_dim": 8, "dropout": 0.0},
    "rectify": {"xi": "auto", "g": "max"},
    "mudaf": {"heads": 2, "negatives": 3},
    "lkg": {"dropout": 0.0},
}


def test_every_method_folder_is_registered_under_its_name():
    folders = {p.name for p in HERE.iterdir() if (p / "__init__.py").is_file()}
    assert set(METHODS) == folders
    for name, method in METHODS.items():
        assert method.name == name and method.folder == HERE / name


@pytest.mark.parametrize("name", sorted(METHODS))
def test_method_declares_the_protocol_and_implements_every_hook(name):
    method = METHODS[name]
    assert isinstance(method, Method)
    for hook in HOOKS:
        assert getattr(type(method), hook) is not getattr(Method, hook), hook
    fields = {f.name for f in dataclasses.fields(method.config_cls)}
    assert set(method.sweep) <= fields, "a sweep key is not a config key"
    assert isinstance(method.lora_exclude, tuple)


@pytest.fixture(scope="module")
def batch_records(train_dir):
    return load_split(train_dir)[:3]


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_hook_runs_on_the_small_base(name, base_dir, batch_records):
    """resolve -> typed config -> tuning, prepare_tokenizer, attach (build + placement), then one
    training step of the method's objective (or the answer loss) and a forward."""
    method = METHODS[name]
    base_tok = load_tokenizer(base_dir)
    context = ResolveContext(
        tokenizer=copy.deepcopy(base_tok), xi_auto=0.5, selected_heads=HEADS, middle_heads=HEADS
    )
    values = method.resolve(VALUES.get(name, {}), LORA, context)
    json.dumps(values)  # what method.json stores
    cfg = method.make_config(values)
    assert isinstance(cfg, method.config_cls)
    assert method.tuning(cfg) in ("lora", "full")

    tok = copy.deepcopy(base_tok)
    added = method.prepare_tokenizer(tok, cfg)
    assert added is (len(tok) > len(base_tok))  # True exactly when it added tokens

    torch.manual_seed(0)
    model = load_base(base_dir).train()
    method.attach(model, cfg)
    objective = method.objective(cfg)
    assert objective is None or isinstance(objective, Objective)
    examples = [encode_example(tok, r) for r in batch_records]
    batch = StepBatch(batch_records, examples, tok.pad_token_id, 2, seed=0, step=0)
    metrics = (objective or AnswerLoss()).step(model, tok, batch)
    assert {"train_loss", "qa_loss"} <= set(metrics)
    assert all(math.isfinite(v) for v in metrics.values())
    assert any(p.grad is not None and p.grad.any() for p in model.parameters())
    with torch.no_grad():
        logits = model.eval()(**pad_batch(examples, tok.pad_token_id)).logits
    assert torch.isfinite(logits).all()


def _method_without(hook: str) -> type:
    """A Method subclass implementing every hook except ``hook``."""
    body = {
        "name": "qlora",
        "config_cls": METHODS["qlora"].config_cls,
        "build": lambda self, model, cfg: None,
        "objective": lambda self, cfg: None,
        "prepare_tokenizer": lambda self, tok, cfg: False,
        "resolve": lambda self, values, lora, context: dict(values),
        "tuning": lambda self, cfg: "lora",
    }
    del body[hook]
    return type("Partial", (Method,), body)


@pytest.mark.parametrize("hook", HOOKS)
def test_a_method_missing_a_hook_is_refused_naming_it(hook):
    with pytest.raises(TypeError, match=f"hooks not implemented: {hook}$"):
        register(_method_without(hook))


def test_a_method_is_registered_from_its_own_folder_and_once():
    complete = _method_without("tuning")
    complete.tuning = lambda self, cfg: "lora"
    complete.__abstractmethods__ = frozenset()
    with pytest.raises(ValueError, match="outside its folder zoomattn.methods.qlora"):
        register(complete)
    complete.__module__ = "zoomattn.methods.qlora"
    with pytest.raises(ValueError, match="'qlora': registered twice"):
        register(complete)


TOY_CONFIG = """
from dataclasses import dataclass


@dataclass(frozen=True)
class ToyConfig:
    width: int = 2
"""
TOY_INIT = """
from zoomattn.methods.protocol import Method
from zoomattn.methods.registry import register
from zoomattn.methods.toy.config import ToyConfig


@register
class Toy(Method):
    name = "toy"
    config_cls = ToyConfig
    sweep = ("width",)

    def build(self, model, cfg):
        pass

    def objective(self, cfg):
        return None

    def prepare_tokenizer(self, tok, cfg):
        return False

    def resolve(self, values, lora, context):
        return dict(values)

    def tuning(self, cfg):
        return "lora"
"""
SHOW_TOY = """
import json, sys
from zoomattn.methods import METHODS, cells
grid = cells({"toy": {"width": [1, 3]}})
print(json.dumps({"methods": sorted(METHODS), "grid": grid, "torch": "torch" in sys.modules}))
"""


def test_a_new_method_is_one_new_folder(tmp_path):
    """A copy of the package with one more folder under methods/ registers the method, expands
    its sweep into grid cells, and still imports without torch."""
    shutil.copytree(ROOT / "zoomattn", tmp_path / "zoomattn")
    toy = tmp_path / "zoomattn" / "methods" / "toy"
    toy.mkdir()
    (toy / "config.py").write_text(TOY_CONFIG)
    (toy / "__init__.py").write_text(TOY_INIT)
    done = subprocess.run(
        [sys.executable, "-c", SHOW_TOY], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    shown = json.loads(done.stdout)
    assert shown["methods"] == sorted([*METHODS, "toy"])
    assert shown["grid"] == {
        "toy-width1": ["toy", {"width": 1}],
        "toy-width3": ["toy", {"width": 3}],
    }
    assert shown["torch"] is False
