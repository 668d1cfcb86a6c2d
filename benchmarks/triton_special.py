"""The special functions and g the fused kernels took before, for A/B runs of their own in one GPU
session. The kernels take eˣ, 1/x and ln x from ``zoomattn/attention/triton_tiles`` (``exp``,
``reciprocal``, ``log``: one .ftz special-function instruction each), and rectification's g and g′
from ``methods/rectify/triton_tiles.rectifier`` (one exponential of −|x| serves tanh, σ and the
smooth max-min). ``--tritons-special`` puts back what they were until 2026-11-27: Triton's tl.exp,
1/x (div.full), tl.sigmoid and lg2.approx without .ftz, g's smooth max-min over the sorted triple
(0, a, b) (``sorted_rectifier``) and OpAmp's row finish by division and tl.log
(``tritons_finish``): the kernels' code of then, at whatever tiles the run gives them.
``--libdevice-log`` puts tl.log (libdevice's logf) in place of today's logarithm. Either
replaces the functions in every module that took them, before the kernels first compile: run
each variant in its own process, as Triton keys its cache by the source it compiled and a kernel
computes that key once."""

import importlib

import triton
import triton.language as tl

KERNEL_MODULES = (
    "zoomattn.attention.triton_tiles",
    "zoomattn.methods.rectify.triton_tiles",
    "zoomattn.methods.rectify.triton_kernel",
    "zoomattn.methods.rectify.triton_backward",
    "zoomattn.methods.opamp.triton_tiles",
    "zoomattn.methods.opamp.triton_kernel",
    "zoomattn.methods.opamp.triton_backward",
)


@triton.jit
def tritons_exp(x, INTERPRETED: tl.constexpr):
    return tl.exp(x)


@triton.jit
def tritons_reciprocal(x, INTERPRETED: tl.constexpr):
    return 1.0 / x


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


@triton.jit
def sorted_smooth_max_min(a, b, INTERPRETED: tl.constexpr):
    hi = tl.maximum(tl.maximum(a, b), 0.0)
    lo = tl.minimum(tl.minimum(a, b), 0.0)
    mid = tl.maximum(tl.minimum(a, b), tl.minimum(tl.maximum(a, b), 0.0))
    e_mh = tl.exp(mid - hi)
    e_lm = tl.exp(lo - mid)
    e_lh = e_mh * e_lm
    s_pos = 1.0 + e_mh + e_lh
    s_neg = 1.0 + e_lm + e_lh
    r_pos, r_neg = 1.0 / s_pos, 1.0 / s_neg
    f = hi + lo + lg2_log(s_pos * r_neg, INTERPRETED)
    a_pos = tl.where(a == hi, 1.0, tl.where(a == lo, e_lh, e_mh))
    a_neg = tl.where(a == lo, 1.0, tl.where(a == hi, e_lh, e_lm))
    b_pos = tl.where(b == hi, 1.0, tl.where(b == lo, e_lh, e_mh))
    b_neg = tl.where(b == lo, 1.0, tl.where(b == hi, e_lh, e_lm))
    return f, a_pos * r_pos + a_neg * r_neg, b_pos * r_pos + b_neg * r_neg


@triton.jit
def sorted_rectifier(x, xi, G_KIND: tl.constexpr, INTERPRETED: tl.constexpr):
    t = 2.0 * tl.sigmoid(2.0 * x) - 1.0
    if G_KIND == 0:  # identity
        g = x
        dg = tl.full(x.shape, 1.0, tl.float32)
    elif G_KIND == 2:  # tanh
        g = xi * t
        dg = xi * (1.0 - t * t)
    elif G_KIND == 3:  # tanh_plus_x
        g = xi * t + x
        dg = xi * (1.0 - t * t) + 1.0
    else:  # max, sigmoid
        if G_KIND == 1:
            a = xi * t
            da = xi * (1.0 - t * t)
        else:
            s = tl.sigmoid(x)
            a = 2.0 * xi * (s - 0.5)
            da = 2.0 * xi * s * (1.0 - s)
        g, df_da, df_dx = sorted_smooth_max_min(a, x, INTERPRETED)
        dg = df_da * da + df_dx
    return g, dg


@triton.jit
def tritons_finish(m_i, l_i, acc, UPCAST: tl.constexpr):
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    return acc / l_safe[:, None], tl.where(empty, float("inf"), m_i + tl.log(l_safe))


def _replace(functions: dict) -> None:
    for name in KERNEL_MODULES:
        module = importlib.import_module(name)
        for attribute, function in functions.items():
            if hasattr(module, attribute):
                setattr(module, attribute, function)


def use(args, has_g: bool = True) -> str:
    """Puts the functions ``args`` asks for in place (call before the kernels first compile) and
    says which the kernels then take, for the benchmark's summary (``has_g``: rectification's,
    whose g it names)."""
    if args.tritons_special and args.libdevice_log:
        raise SystemExit("--libdevice-log replaces today's logarithm: not with --tritons-special")
    if args.tritons_special:
        _replace({"exp": tritons_exp, "reciprocal": tritons_reciprocal, "log": lg2_log,
                  "rectifier": sorted_rectifier, "finish": tritons_finish})  # fmt: skip
    if args.libdevice_log:
        _replace({"log": libdevice_log})
    if args.smoke:  # Triton's interpreter runs no PTX: tl.exp, 1/x, tl.sigmoid and tl.log
        functions = "interpreter's"
    elif args.tritons_special:  # OpAmp's one logarithm, its row finish's, was tl.log
        functions = "Triton's (tl.exp, div.full, " + (
            "tl.sigmoid, lg2.approx)" if has_g else "tl.log)"
        )
    else:
        functions = ".ftz (ex2, rcp, lg2)" + (", log=tl.log" if args.libdevice_log else "")
    g = "g over the sorted triple" if args.tritons_special else "g from e^-|x|"
    return f"special functions {functions}" + (f", {g}" if has_g else "")
