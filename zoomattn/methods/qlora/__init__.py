"""QLoRA baseline: the 4-bit base with the shared LoRA, and no change to attention."""

from zoomattn.methods.protocol import Method, ResolveContext
from zoomattn.methods.qlora.config import QLoRAConfig
from zoomattn.methods.registry import register


@register
class QLoRA(Method):
    name = "qlora"
    config_cls = QLoRAConfig

    def build(self, model, cfg: QLoRAConfig) -> None:
        """Nothing to add: the LoRA layers every method shares are applied by the loader."""

    def objective(self, cfg: QLoRAConfig) -> None:
        return None

    def prepare_tokenizer(self, tok, cfg: QLoRAConfig) -> bool:
        return False

    def resolve(self, values: dict, lora: dict, context: ResolveContext) -> dict:
        return dict(values)

    def tuning(self, cfg: QLoRAConfig) -> str:
        return "lora"


__all__ = ["QLoRA", "QLoRAConfig"]
