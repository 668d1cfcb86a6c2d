"""MuDAF (docs/papers.md §3): the base's own attention, trained with a contrastive loss on chosen
heads."""

from zoomattn.methods.mudaf.config import MudafConfig
from zoomattn.methods.protocol import Method, ResolveContext
from zoomattn.methods.registry import register


@register
class Mudaf(Method):
    name = "mudaf"
    config_cls = MudafConfig
    sweep = ("heads", "selection")

    def build(self, model, cfg: MudafConfig) -> None:
        """Nothing to add: MuDAF trains the base's own query and key projections."""

    def objective(self, cfg: MudafConfig):
        """The contrastive term on the selected heads; none at ``heads: 0`` (Vanilla-SFT)."""
        if cfg.heads == 0 or cfg.alpha == 0:
            return None
        if not cfg.selected:
            raise ValueError(
                f"selected: heads = {cfg.heads} but no heads were chosen (MudafConfig.resolved "
                "fills them in from the retrieval scores)"
            )
        from zoomattn.methods.mudaf.objective import ContrastiveObjective

        return ContrastiveObjective(cfg.selected, cfg.alpha, cfg.tau, cfg.negatives)

    def prepare_tokenizer(self, tok, cfg: MudafConfig) -> bool:
        return False

    def resolve(self, values: dict, lora: dict, context: ResolveContext) -> dict:
        return self.make_config(values).resolved(lora, selected_heads=context.selected_heads)

    def tuning(self, cfg: MudafConfig) -> str:
        return cfg.tuning


__all__ = ["Mudaf", "MudafConfig"]
