"""attention/reuse.py: a value derived from tensors is built once while the same, unedited
tensors come back, and never keeps them alive."""

import gc
import weakref

import torch

from zoomattn.attention.reuse import SameTensors


def test_a_value_is_built_once_per_same_unedited_tensors_and_the_tensors_are_not_kept():
    cache, built = SameTensors(), []

    def get(name, tensors):
        return cache.get(name, tensors, lambda: built.append(name) or len(built))

    a, b = torch.zeros(3), torch.zeros(3)
    assert get("x", (a, None)) == get("x", (a, None)) == 1  # every layer of one forward
    assert get("y", (a, None)) == 2  # another value of the same tensors
    assert get("x", (b, None)) == 3  # other tensors: built anew
    assert get("x", (b, a)) == 4  # None and a tensor differ
    b.add_(1)  # edited in place
    assert get("x", (b, a)) == 5 and get("x", (b, a)) == 5
    gone = weakref.ref(a)
    del a
    gc.collect()
    assert gone() is None  # the cache held a weak reference only
