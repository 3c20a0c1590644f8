"""Instructions a math warp of the SM90 paged-MQA kernel issues per KV block, counted in its SASS.

The steady-state path from one `WARPGROUP.DEPBAR` (the WGMMA wait) round the loop back to it: the loop is the
span between the back edge (`BRA` to a lower address) that encloses the wait and its target. Inside it a forward
conditional branch to an address still inside the loop is taken (it skips the code run when a request changes:
the next request's length, the Q stage's wait and the weights' loads) and one that leaves the loop is not (the
retry of an mbarrier's try-wait, an exit). Prints the count by opcode class and the branches taken, so the path
can be checked by eye. A kernel with two loops (odd next_n: one and two tokens) reports each.

    cuobjdump -sass kernel.cubin > kernel.sass; python bench/studies/sass_loop_counts.py kernel.sass
"""

from __future__ import annotations

import argparse
import re
from collections import Counter

LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
CLASSES = (
    ("FMNMX", "FMNMX"),
    ("FFMA", "FFMA"),
    ("FMUL", "FMUL"),
    ("FADD", "FADD"),
    ("HFMA2/HMUL2", "HFMA2|HMUL2|HADD2"),
    ("F2FP", "F2FP"),
    ("SHFL", "SHFL"),
    ("STG", "STG"),
    ("LDS", "LDS"),
    ("LDG", "LDG"),
    ("QGMMA", "QGMMA"),
    ("WARPGROUP", "WARPGROUP"),
    ("SYNCS", "SYNCS"),
    ("uniform (U*)", "U[A-Z]|S2UR|R2UR"),
    ("integer/address", "IMAD|IADD|LEA|LOP|SHF|PRMT|ISETP|VIADD|MOV|SEL|PLOP|LDC|IABS|I2F|F2I|SHL|SHR|POPC|FLO"),
    ("control", "BRA|EXIT|BSYNC|BSSY|WARPSYNC|NOP|CALL|RET"),
)


def parse(text: str) -> list[tuple[int, str, str, str]]:
    """(address, predicate, opcode, operands) of each instruction in the listing."""
    return [(int(m[1], 16), (m[2] or "").strip(), m[3], m[4]) for m in LINE.finditer(text)]


def opcode_class(opcode: str) -> str:
    base = opcode.split(".")[0]
    for name, pattern in CLASSES:
        if re.fullmatch(f"(?:{pattern})\\w*", base):
            return name
    return "other"


def loops(code) -> list[tuple[int, int]]:
    """(head, back edge) of the innermost loop round each WGMMA wait. An mbarrier try-wait's retry is out of
    line: a branch to a stub past the kernel's end, which jumps back to the instruction after that branch; such
    a jump back is no loop."""
    after_branch = {code[i + 1][0]: _target(code[i][2], code[i][3]) for i in range(len(code) - 1)}
    backward = [
        (t, a)
        for a, _, op, operands in code
        if (t := _target(op, operands)) is not None and t < a and not t < (after_branch.get(t) or -1) <= a
    ]
    spans = set()
    for wait in (a for a, _, op, _ in code if op.startswith("WARPGROUP.DEPBAR")):
        enclosing = [(back - head, head, back) for head, back in backward if head <= wait < back]
        if enclosing:
            spans.add(min(enclosing)[1:])
    return sorted(spans)


def _target(opcode: str, operands: str) -> int | None:
    if not opcode.startswith("BRA"):
        return None
    found = re.search(r"0x([0-9a-f]+)\s*$", operands)
    return int(found[1], 16) if found else None


def steady_path(code, head: int, back: int):
    """The instructions from the loop's head to its back edge, forward branches inside the loop taken."""
    by_address = {a: i for i, (a, *_rest) in enumerate(code)}
    path, taken, i = [], [], by_address[head]
    while True:
        address, predicate, opcode, operands = code[i]
        path.append(code[i])
        if address == back:
            return path, taken
        target = _target(opcode, operands)
        if target is not None and head < target <= back and target > address:
            taken.append((address, target))
            i = by_address[target]
            continue
        i += 1


def report(sass: str) -> list[tuple[int, Counter, list]]:
    code = parse(sass)
    out = []
    for head, back in loops(code):
        path, taken = steady_path(code, head, back)
        out.append((len(path), Counter(opcode_class(op) for _, _, op, _ in path), taken))
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sass", nargs="+")
    args = parser.parse_args(argv)
    for name in args.sass:
        with open(name, encoding="utf-8") as f:
            results = report(f.read())
        for k, (total, classes, taken) in enumerate(results):
            shown = " ".join(f"{c}={classes[c]}" for c, _ in (*CLASSES, ("other", "")) if classes[c])
            branches = " ".join(f"{a:#x}->{t:#x}" for a, t in taken)
            print(f"{name} loop {k}: {total} instructions | {shown} | taken {branches}")


if __name__ == "__main__":
    main()
