"""Methods, one folder each, plugged in through one protocol (``protocol.Method``).

A method folder holds its typed config, the modules it hangs on a model, the attention kernel it
owns and its training step; it registers itself, and ``registry.discover`` finds every folder, so
a new method is one new folder. The LoRA layers every method shares come from
``zoomattn.methods.loading``; a method may take some target modules over (``lora_exclude``), or
train every parameter of the unquantised base instead (``tuning`` ``full``). Importing this
package needs no torch: the workflow reads configs through it.
"""

from zoomattn.methods.protocol import Method, Objective, ResolveContext, StepBatch
from zoomattn.methods.registry import METHODS, cells, discover, method_of, register

discover()

__all__ = [
    "METHODS",
    "Method",
    "Objective",
    "ResolveContext",
    "StepBatch",
    "cells",
    "method_of",
    "register",
]
