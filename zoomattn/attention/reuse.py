"""Values derived from tensors, kept while the same tensors come back unedited.

A model's layers all receive the same mask and segment tensors in one forward; what a fused
path derives from them (FlexAttention's block mask, the guided rows, a padding mask's key spans,
the tiles a mask leaves work in) costs reductions and host syncs, so it is built by the first
layer and reused by the others and by gradient checkpointing's recomputation. The tensors are
held by weak references (the cache never keeps them alive), and each one's version counter is
part of the key, so an in-place edit builds anew."""

from __future__ import annotations

import weakref


class SameTensors:
    """Named values built from ``tensors`` (None allowed), dropped when other tensors come."""

    def __init__(self) -> None:
        self._key: tuple = ()
        self._values: dict[str, object] = {}

    def get(self, name: str, tensors: tuple, build):
        """``build()`` under ``name``, built once while the same, unedited ``tensors`` come back."""
        if not self._holds(tensors):
            self._key = tuple(None if t is None else (weakref.ref(t), t._version) for t in tensors)
            self._values = {}
        if name not in self._values:
            self._values[name] = build()
        return self._values[name]

    def clear(self) -> None:
        """Forget every value (benchmarks/relevance_fusion_cuda.py: a block mask built per step)."""
        self._key, self._values = (), {}

    def _holds(self, tensors: tuple) -> bool:
        return len(self._key) == len(tensors) and all(
            (kept is None and t is None)
            or (kept is not None and t is not None and kept[0]() is t and kept[1] == t._version)
            for kept, t in zip(self._key, tensors, strict=True)
        )
