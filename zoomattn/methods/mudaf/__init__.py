from zoomattn.methods.mudaf.config import MudafConfig

__all__ = ["MudafConfig"]
