"""Reading a kernel compiled offline (no GPU needed): its SASS, its loops and its resources, with the CUDA binaries
that ship in Triton's wheel (nvdisasm, cuobjdump). For the tests whose point is the machine code: what a PDL kernel
reads before its wait, what the K loop keeps in registers."""

import os
import re
import subprocess
import tempfile

import triton


def cubin_tool(tool: str, flag: str, cubin: bytes) -> str:
    """What one of the CUDA binaries in Triton's wheel (cuobjdump, nvdisasm) prints for a compiled kernel."""
    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", tool)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        return subprocess.run([path, flag, file.name], capture_output=True, text=True, check=True).stdout


def resource_usage(cubin: bytes) -> dict:
    """A compiled kernel's registers a thread, its stack (bytes a thread: registers spilled, if not 0) and its
    shared memory (bytes a program), as cuobjdump reads them from the cubin."""
    text = cubin_tool("cuobjdump", "-res-usage", cubin)
    registers, stack, shared = re.search(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)", text).groups()
    return {"registers": int(registers), "stack": int(stack), "shared": int(shared)}


def sass(cubin: bytes) -> list[str]:
    """The kernel's SASS instructions in order, predicates dropped."""
    listing = cubin_tool("nvdisasm", "-c", cubin)
    return [_instruction(line) for line in listing.splitlines() if _INSTRUCTION.match(line)]


_INSTRUCTION = re.compile(r"\s*/\*[0-9a-f]{4,}\*/")


def _instruction(line: str) -> str:
    """An nvdisasm line's instruction, without its address, predicate and encoding comment."""
    return re.sub(r"^\s*/\*[0-9a-f]+\*/\s*(@!?U?P\w+\s+)?", "", line).split(" ;")[0].strip()


def main_loop(cubin: bytes) -> list[str]:
    """The SASS instructions of the kernel's longest innermost loop (its K loop), disassembled with the nvdisasm
    that ships in Triton's wheel."""
    return max(innermost_loops(cubin), key=len, default=[])


def innermost_loops(cubin: bytes) -> list[list[str]]:
    """The SASS instructions of each loop that holds no other loop, predicates dropped."""
    lines = cubin_tool("nvdisasm", "-c", cubin).splitlines()
    labels = {match.group(1): i for i, line in enumerate(lines) if (match := re.match(r"^(\.L_x_\d+):", line))}
    instructions = [(i, line) for i, line in enumerate(lines) if _INSTRUCTION.match(line)]
    spans = []  # (label, branch) line numbers of each loop: a branch back to a label above it
    for i, line in instructions:
        match = re.search(r"BRA `\((\.L_x_\d+)\)", line)
        if match and labels.get(match.group(1), i) < i:
            spans.append((labels[match.group(1)], i))
    innermost = [(begin, end) for begin, end in spans
                 if not any(begin <= other_begin and other_end <= end and (other_begin, other_end) != (begin, end)
                            for other_begin, other_end in spans)]
    return [[_instruction(text) for j, text in instructions if begin < j <= end] for begin, end in innermost]
