from zoomattn.methods.rectify.config import RectifyConfig

__all__ = ["RectifyConfig"]
