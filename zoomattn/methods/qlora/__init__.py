from zoomattn.methods.qlora.config import QLoRAConfig

__all__ = ["QLoRAConfig"]
