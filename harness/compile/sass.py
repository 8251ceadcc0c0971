"""SASS, as `cuobjdump -sass` prints it: the one parser of that format (functions, loops), and what the
lab reads from it: instructions per loop (mandelbrot's hot loop), and register-bank pairs in FFMAs
(matmul's ladder, whose speed ptxas's register colouring can change by 8%: see NOTES-matmul.md).
Nothing here runs a GPU; cuobjdump reads the built library.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.base.errors import ToolMissing
from harness.compile import toolchain

FP32_OPS = ("FADD", "FMUL", "FFMA")
_SASS_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
_REG = re.compile(r"^-?\|?R(\d+)\|?(\.reuse)?$")


@dataclass(frozen=True)
class SassLoop:
    start: int
    end: int
    opcodes: tuple
    instrs: tuple = ()  # (address, opcode, operands) of the body

    @property
    def total(self) -> int:
        return len(self.opcodes)

    @property
    def fp32(self) -> int:
        return sum(1 for op in self.opcodes if op.split(".")[0] in FP32_OPS)


def find_cuobjdump() -> str | None:
    p = shutil.which("cuobjdump")
    if p:
        return p
    home = toolchain.cuda_home()
    if home and (Path(home) / "bin" / "cuobjdump").is_file():
        return str(Path(home) / "bin" / "cuobjdump")
    return None


def sass_functions(text: str) -> dict[str, list[tuple[int, str, str]]]:
    """cuobjdump -sass text -> {mangled name: [(address, opcode, operands)]}."""
    funcs: dict[str, list] = {}
    cur = None
    for line in text.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = funcs.setdefault(m.group(1), [])
            continue
        m = _SASS_LINE.search(line)
        if m and cur is not None:
            cur.append((int(m.group(1), 16), m.group(3), m.group(4).strip()))
    return funcs


def sass_loops(instrs: list[tuple[int, str, str]]) -> list[SassLoop]:
    """Every backward branch (BRA to a lower address) as a loop from its target to the branch."""
    loops = []
    for addr, op, args in instrs:
        if op.split(".")[0] != "BRA":
            continue
        m = re.search(r"0x([0-9a-f]+)\s*$", args)
        if not m:
            continue
        target = int(m.group(1), 16)
        if target < addr:
            body = tuple(i for i in instrs if target <= i[0] <= addr)
            loops.append(SassLoop(target, addr, tuple(o for _, o, _ in body), body))
    return loops


def ffma_same_bank(instrs) -> tuple[int, int]:
    """(FFMAs, those with two or more register sources in one bank and not from the reuse cache).

    Volta and later read an FFMA's three sources from a register file of two banks (the register
    number's parity), one read per bank per cycle; a source marked .reuse comes from the operand reuse
    cache instead. Two reads from one bank make the instruction wait a cycle. A main loop that is all
    FFMA and LDS feels that directly: 3337 of 4096 such FFMAs made 11's tiles 8% slower than 616 did."""
    total = pairs = 0
    for _, op, args in instrs:
        if op.split(".")[0] != "FFMA":
            continue
        total += 1
        banks = []
        for src in [a.strip() for a in args.split(",")][1:4]:
            m = _REG.match(src)
            if m and not m.group(2):
                banks.append(int(m.group(1)) % 2)
        if max(banks.count(0), banks.count(1)) >= 2:
            pairs += 1
    return total, pairs


def dump(path: Path, function: str | None = None) -> str:
    """cuobjdump -sass of a built binary or library (one function if named). ToolMissing when
    cuobjdump, or the nvdisasm it runs to print SASS, is not here; CalledProcessError when it fails."""
    tool = find_cuobjdump()
    if tool is None:
        raise ToolMissing("cuobjdump", "searched PATH and $CUDA_HOME/bin")
    beside = Path(tool).parent / "nvdisasm"
    if not (beside.is_file() or shutil.which("nvdisasm")):
        raise ToolMissing("nvdisasm", f"cuobjdump at {tool} runs it to print SASS; not beside it nor on PATH")
    cmd = [tool, "-sass", *(["-fun", function] if function else []), str(path)]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
