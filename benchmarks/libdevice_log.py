"""The logarithm rectification's kernel took before ``lg2.approx`` (``tl.log``: libdevice's logf
when compiled), for ``rectified_triton.py --libdevice-log``, which puts it in place of
``methods/rectify/triton_tiles._log`` before the kernels first compile: an A/B of the two in one
GPU session, each in its own process."""

import triton
import triton.language as tl


@triton.jit
def libdevice_log(x, INTERPRETED: tl.constexpr):
    return tl.log(x)


def use_it() -> None:
    from zoomattn.methods.rectify import triton_tiles

    triton_tiles._log = libdevice_log
