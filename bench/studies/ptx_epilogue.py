"""The floating-point expression of every logit the SM90 paged-MQA kernel stores, read from its PTX.

Logits are bit-identical between two kernels when each stored value is the same expression of the same inputs:
the same operations (max, mul, fma, add, the butterfly shuffles), in the same order and association, on the same
WGMMA accumulator positions. This walks back from every `st.global.f32` through the PTX's data flow (the nearest
definition of a register before its use; the epilogue is straight-line code after unrolling) and prints each
expression with its leaves named: `acc[k]` (position k of the WGMMA's accumulator list), `ld<n>` (a shared-memory
load: a head weight or a KV scale, numbered by first use within the expression, so which accumulators share a
weight shows), constants as written. Instruction scheduling and register names do not enter, only the data flow.

    python bench/studies/ptx_epilogue.py A.ptx [B.ptx ...]    # the distinct expressions of each file, and whether
                                                              # the files' sets are equal
    python bench/studies/ptx_epilogue.py --expect BASE.ptx[,BASE2.ptx] CAND.ptx
                                                              # exit 1 unless CAND's set equals the union of BASE's

Written for the candidate of docs/results/paged_mqa_pingpong_candidate.patch (see docs/deep-gemm-read-once.md).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from pathlib import Path

_FP_OPS = ("max.f32", "mul.f32", "fma.rn.f32", "add.f32", "mul.rn.f32", "add.rn.f32", "sub.f32")
_PASS = ("mov.f32", "mov.b32", "mov.u32", "mov.s32")


def _instructions(text: str) -> list[tuple[str, list[str]]]:
    """(opcode, operands) in text order; wgmma's brace list kept as one operand."""
    out = []
    for raw in text.split(";"):
        line = re.sub(r"//[^\n]*", "", raw).strip()  # comments
        # labels, and the braces around inline asm (not a brace list of registers)
        while (m := re.match(r"(\$\w+:|\{(?!\s*%)|\})\s*", line)) and m.end() > 0:
            line = line[m.end() :]
        if not line or line.startswith("."):
            continue
        if line.startswith("@"):
            line = line.split(None, 1)[1] if " " in line else ""
        parts = line.split(None, 1)
        if not parts:
            continue
        op, rest = parts[0], parts[1] if len(parts) > 1 else ""
        operands, depth, cur = [], 0, ""
        for ch in rest:
            if ch in "{[":
                depth += 1
            if ch in "}]":
                depth -= 1
            if ch == "," and depth == 0:
                operands.append(cur.strip())
                cur = ""
            else:
                cur += ch
        if cur.strip():
            operands.append(cur.strip())
        out.append((op, operands))
    return out


def expressions(ptx: str) -> list[str]:
    """The expression of each stored float logit, in store order."""
    insts = _instructions(ptx)
    defs: dict[str, list[int]] = {}  # register -> the indexes of the instructions that write it

    def define(reg: str, i: int) -> None:
        defs.setdefault(reg, []).append(i)

    acc_pos: dict[tuple[int, str], int] = {}
    for i, (op, ops) in enumerate(insts):
        if not ops:
            continue
        if op.startswith("wgmma.mma_async"):
            regs = [r.strip() for r in ops[0].strip("{}").split(",")]
            for k, r in enumerate(regs):
                define(r, i)
                acc_pos[(i, r)] = k
        elif op.startswith("ld.shared") and ops[0].startswith("{"):
            for r in ops[0].strip("{}").split(","):
                define(r.strip(), i)
        elif op.startswith("shfl.sync"):
            define(ops[0].split("|")[0], i)
        elif not op.startswith(("st.", "wgmma", "mbarrier", "bar", "fence", "@", "bra", "ret", "setmaxnreg")):
            define(ops[0], i)

    def last_def(reg: str, before: int) -> int | None:
        best = None
        for i in defs.get(reg, []):
            if i < before:
                best = i
        return best

    def build(reg: str, at: int, names: dict) -> str:
        if not reg.startswith("%"):
            return reg
        i = last_def(reg, at)
        if i is None:
            return f"?{reg}"
        op, ops = insts[i]
        if op.startswith("wgmma.mma_async"):
            return f"acc[{acc_pos[(i, reg)]}]"
        if op.startswith("ld.shared"):
            key = (i, reg)
            names.setdefault(key, f"ld{len(names)}")
            return names[key]
        if op in _PASS:
            return build(ops[1], i, names)
        if op.startswith("shfl.sync.bfly"):
            return f"bfly({build(ops[2], i, names)}, {build(ops[1], i, names)})"
        if op in _FP_OPS:
            return f"{op.split('.')[0]}({', '.join(build(o, i, names) for o in ops[1:])})"
        return f"<{op}>"

    exprs = []
    for i, (op, ops) in enumerate(insts):
        if op == "st.global.f32":
            exprs.append(build(ops[1], i, {}))
    return exprs


def summary(path: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for e in expressions(path.read_text()):
        counts[e] = counts.get(e, 0) + 1
    return counts


def _short(e: str) -> str:
    return hashlib.sha256(e.encode()).hexdigest()[:10]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ptx", nargs="+", type=Path)
    parser.add_argument("--expect", help="comma-separated PTX files whose expressions together the others must equal")
    parser.add_argument("--show", action="store_true", help="print each distinct expression in full")
    args = parser.parse_args(argv)
    base: set[str] = set()
    if args.expect:
        for p in args.expect.split(","):
            s = summary(Path(p))
            print(f"{p}: {sum(s.values())} stores, {len(s)} distinct expressions: {' '.join(sorted(map(_short, s)))}")
            base |= set(s)
    ok = True
    for p in args.ptx:
        s = summary(p)
        bad = [e for e in s if "?" in e or "<" in e]
        print(
            f"{p}: {sum(s.values())} stores, {len(s)} distinct expressions: {' '.join(sorted(map(_short, s)))}"
            + (f"  [{len(bad)} with unresolved leaves]" if bad else "")
        )
        if args.show:
            for e in sorted(s):
                print(f"  {_short(e)} x{s[e]}: {e}")
        if args.expect:
            same = set(s) == base
            ok &= same and not bad
            print(
                f"  equal to the expected set: {same}"
                + ("" if same else f" (missing {len(base - set(s))}, extra {len(set(s) - base)})")
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
