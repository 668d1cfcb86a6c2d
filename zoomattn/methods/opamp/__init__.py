from zoomattn.methods.opamp.config import OpAmpConfig

__all__ = ["OpAmpConfig"]
