"""The special functions the fused kernels took before, for A/B runs of their own in one GPU
session. The kernels take eˣ, 1/x and ln x from ``zoomattn/attention/triton_tiles`` (``exp``,
``reciprocal``, ``log``: one .ftz special-function instruction each) and rectification's σ from
``_sigmoid``. ``--tritons-special`` puts back what they were until 2026-11-27: Triton's tl.exp,
1/x (div.full), tl.sigmoid and lg2.approx without .ftz; ``--libdevice-log`` puts tl.log
(libdevice's logf) in place of the logarithm alone. Either replaces the functions in every
module that took them, before the kernels first compile: run each variant in its own process,
as Triton keys its cache by the source it compiled and a kernel computes that key once."""

import importlib

import triton
import triton.language as tl

KERNEL_MODULES = (
    "zoomattn.attention.triton_tiles",
    "zoomattn.methods.rectify.triton_tiles",
    "zoomattn.methods.rectify.triton_kernel",
    "zoomattn.methods.opamp.triton_tiles",
    "zoomattn.methods.opamp.triton_kernel",
)


@triton.jit
def tritons_exp(x, INTERPRETED: tl.constexpr):
    return tl.exp(x)


@triton.jit
def tritons_reciprocal(x, INTERPRETED: tl.constexpr):
    return 1.0 / x


@triton.jit
def tritons_sigmoid(x, INTERPRETED: tl.constexpr):
    return tl.sigmoid(x)


@triton.jit
def lg2_log(x, INTERPRETED: tl.constexpr):
    if INTERPRETED:
        return tl.log(x)
    log2 = tl.inline_asm_elementwise(
        "lg2.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1
    )
    return log2 * 0.6931471805599453


@triton.jit
def libdevice_log(x, INTERPRETED: tl.constexpr):
    return tl.log(x)


def _replace(functions: dict) -> None:
    for name in KERNEL_MODULES:
        module = importlib.import_module(name)
        for attribute, function in functions.items():
            if hasattr(module, attribute):
                setattr(module, attribute, function)


def use(args) -> str:
    """Puts the functions ``args`` asks for in place (call before the kernels first compile) and
    says which the kernels then take, for the benchmark's summary."""
    if args.smoke:  # Triton's interpreter runs no PTX: tl.exp, 1/x, tl.sigmoid and tl.log
        taken = "interpreter's"
    elif args.tritons_special:
        taken = "Triton's (tl.exp, div.full, tl.sigmoid, lg2.approx)"
    else:
        taken = ".ftz (ex2, rcp, lg2)"
    if args.tritons_special:
        _replace({"exp": tritons_exp, "reciprocal": tritons_reciprocal,
                  "_sigmoid": tritons_sigmoid, "log": lg2_log})  # fmt: skip
    if args.libdevice_log:
        _replace({"log": libdevice_log})
        taken += ", log=tl.log" if not args.smoke else ""
    return f"special functions {taken}"
