"""LKG-RALM (docs/papers.md §4): a layer-wise passage estimator guides attention to relevant
passages."""

from zoomattn.methods.lkg.config import LkgConfig
from zoomattn.methods.protocol import Method, ResolveContext
from zoomattn.methods.registry import register


@register
class Lkg(Method):
    name = "lkg"
    config_cls = LkgConfig
    sweep = ("beta",)

    def build(self, model, cfg: LkgConfig) -> None:
        from zoomattn.methods.lkg.model import attach

        attach(model, cfg)

    def objective(self, cfg: LkgConfig):
        """The answer loss and the estimator's losses, from one forward."""
        from zoomattn.methods.lkg.objective import LkgObjective

        return LkgObjective(cfg)

    def prepare_tokenizer(self, tok, cfg: LkgConfig) -> bool:
        from zoomattn.methods.lkg.model import prepare_tokenizer

        prepare_tokenizer(tok, cfg)
        return True

    def resolve(self, values: dict, lora: dict, context: ResolveContext) -> dict:
        return self.make_config(values).resolved(
            lora, middle_heads=context.middle_heads, tokenizer=context.tokenizer
        )

    def tuning(self, cfg: LkgConfig) -> str:
        return "lora"


__all__ = ["Lkg", "LkgConfig"]
