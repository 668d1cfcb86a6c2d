"""What ``triton_static.py`` reads in a compiled kernel's SASS (cuobjdump's text): opcode counts,
the inner loop every tile runs, the bytes that loop loads from global memory, and the subnormal
range checks ptxas puts around a special function without .ftz. Text only: no GPU, no Triton."""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections import Counter

# an instruction's address (4 hex digits up to 0xfff0, more in longer kernels), its opcode after
# a guard, and its operands
INSTRUCTION = r"^\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)([^;]*);"

# ptxas wraps a special-function instruction without .ftz in compares of its operand against the
# subnormal range: ex2.approx (-126), div.full (2¹²⁶ ≈ 8.5e37, and 2⁻¹²⁶ ≈ 1.18e-38 where it
# divides), lg2.approx (2⁻¹²⁶): the count is of those compares, one or two per instruction
SUBNORMAL_CHECK = (
    r"FSETP\.\w+(?:\.\w+)*\s+[^;]*"
    r"(?:, -126, |8\.50705917302346158658e\+37|1\.175494350822287508e-38)"
)

# Global loads and the bytes each thread's instruction moves: plain loads (LDG) and Ampere's
# asynchronous copies to shared memory (LDGSTS, how Triton pipelines a tile's loads), their
# width the suffix that names one (.256: 32 bytes, .128: 16, .64: 8, .U16/.S16: 2, .U8/.S8: 1;
# none: 4), wherever it stands among the others (LDG.E.128.CONSTANT, LDG.E.U16.STRONG.GPU).
GLOBAL_LOADS = ("LDG", "LDGSTS")
WIDTH_BYTES = {"256": 32, "128": 16, "64": 8, "U16": 2, "S16": 2, "U8": 1, "S8": 1}
# loads whose bytes no opcode states: Hopper's tensor-memory copies (a descriptor's box)
UNSIZED_LOADS = ("UTMALDG", "UBLKCP")


def cuobjdump(cubin: bytes, flag: str, path: str) -> str:
    """cuobjdump ``flag`` (``--dump-sass``, ``--dump-resource-usage``) of ``cubin``; ``path``:
    the cuobjdump binary (Triton ships one)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([path, flag, f.name], capture_output=True, text=True,
                              check=True).stdout  # fmt: skip


def instructions(sass: str) -> list[tuple[int, str, str]]:
    """(address, full opcode, operands) of every instruction."""
    return [(int(a, 16), op, rest) for a, op, rest in re.findall(INSTRUCTION, sass, re.M)]


def opcode_counts(sass: str) -> Counter:
    """How many times each opcode (before its first dot) appears in cuobjdump's SASS."""
    return Counter(op.split(".")[0] for _, op, _ in instructions(sass))


def inner_loop(sass: str) -> Counter:
    """The full opcodes of the shortest loop (a branch back to an earlier address) that holds a
    tensor-core product, or with fp32 inputs, whose products are FMAs, a special function: the key
    (or query) loop every tile of the kernel runs, where the kernel's whole code also holds what
    runs once. ``base`` gives its counts by opcode before the first dot."""
    code = instructions(sass)
    loops = []
    for address, op, rest in code:
        # a branch's target is its last operand (after a predicate where it has one: BRA.U !UP0, …)
        target = re.search(r"0x([0-9a-f]+)\s*$", rest) if op.split(".")[0] == "BRA" else None
        if target and int(target.group(1), 16) < address:
            loops.append(Counter(o for a, o, _ in code if int(target.group(1), 16) <= a <= address))
    for holds in (("HGMMA", "HMMA"), ("MUFU",)):
        inner = [loop for loop in loops if any(base(loop)[op] for op in holds)]
        if inner:
            return min(inner, key=lambda c: sum(c.values()))
    return Counter()


def base(loop: Counter) -> Counter:
    """``loop``'s counts by opcode before its first dot (MUFU.EX2 and MUFU.RCP are both MUFU)."""
    counts = Counter()
    for op, n in loop.items():
        counts[op.split(".")[0]] += n
    return counts


def load_bytes(loop: Counter) -> int | None:
    """Bytes one thread loads from global memory in one pass of ``loop`` (``inner_loop``'s):
    its LDG and LDGSTS by width; None where it holds a tensor-memory copy, whose size no opcode
    states."""
    if any(base(loop)[op] for op in UNSIZED_LOADS):
        return None
    total = 0
    for op, n in loop.items():
        parts = op.split(".")
        if parts[0] in GLOBAL_LOADS:
            total += n * next((WIDTH_BYTES[p] for p in parts[1:] if p in WIDTH_BYTES), 4)
    return total
