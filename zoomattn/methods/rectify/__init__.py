"""Attention rectification (docs/papers.md §2): g(ξ) on a rank-r update of the attention scores."""

from zoomattn.methods.protocol import Method, ResolveContext
from zoomattn.methods.rectify.config import RectifyConfig
from zoomattn.methods.registry import register


@register
class Rectify(Method):
    name = "rectify"
    config_cls = RectifyConfig
    sweep = ("xi", "g")
    lora_exclude = ("q_proj",)  # the shared LoRA must not also adapt q_proj: ΔW is that update

    def build(self, model, cfg: RectifyConfig) -> None:
        from zoomattn.methods.rectify.model import attach

        attach(model, cfg)

    def objective(self, cfg: RectifyConfig) -> None:
        return None

    def prepare_tokenizer(self, tok, cfg: RectifyConfig) -> bool:
        return False

    def resolve(self, values: dict, lora: dict, context: ResolveContext) -> dict:
        return self.make_config(values).resolved(lora, xi_auto=context.xi_auto)

    def tuning(self, cfg: RectifyConfig) -> str:
        return "lora"


__all__ = ["Rectify", "RectifyConfig"]
