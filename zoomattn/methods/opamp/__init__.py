"""OpAmp adaptation (docs/papers.md §1): two adapted attentions, common- and differential-mode
gain."""

from zoomattn.methods.opamp.config import OpAmpConfig
from zoomattn.methods.protocol import Method, ResolveContext
from zoomattn.methods.registry import register


@register
class OpAmp(Method):
    name = "opamp"
    config_cls = OpAmpConfig
    sweep = ("K",)

    def build(self, model, cfg: OpAmpConfig) -> None:
        from zoomattn.methods.opamp.model import attach

        attach(model, cfg)

    def objective(self, cfg: OpAmpConfig) -> None:
        return None

    def prepare_tokenizer(self, tok, cfg: OpAmpConfig) -> bool:
        return False

    def resolve(self, values: dict, lora: dict, context: ResolveContext) -> dict:
        return dict(values)  # nothing to fill in: saved as written (K "inf" included)

    def tuning(self, cfg: OpAmpConfig) -> str:
        return "lora"


__all__ = ["OpAmp", "OpAmpConfig"]
