from zoomattn.methods.lkg.config import LkgConfig

__all__ = ["LkgConfig"]
