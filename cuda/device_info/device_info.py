"""device_info: deviceQuery in the Stringer course (sections 1.4-1.6), plus derived peaks."""

from __future__ import annotations

from harness.calling import library, parse, runner
from harness.measuring import bench
from harness.programs.record import Program, Tour


def parse_output(text: str) -> dict:
    """`device_info key=value` lines -> dict (numbers converted)."""
    d = parse.tagged_dict(text, "device_info")
    if "name" not in d:
        raise ValueError("no `device_info name=...` line in the output")
    cc = d.get("compute_capability")
    if isinstance(cc, float):  # "9.0" was read as a number; keep it the text it is
        d["compute_capability"] = f"{cc:.1f}"
    return d


def run(device: int = 0) -> dict:
    """Run build/bin/device_info and parse what it prints."""
    return parse_output(runner.run("device_info", device).stdout)


FIELDS = ("cc_major", "cc_minor", "sm_count", "clock_khz", "mem_clock_khz", "bus_width_bits", "l2_bytes",
          "global_mem_bytes", "smem_per_block", "smem_per_block_optin", "smem_per_sm", "regs_per_block",
          "regs_per_sm", "max_threads_per_block", "max_threads_per_sm", "max_blocks_per_sm", "warp_size",
          "fp32_lanes_per_sm", "fp32_tflops", "fp32_inst_per_s", "mem_bandwidth_gbs")


def query(device: int = 0) -> dict:
    """The same facts through libdevice_info.so, without a subprocess."""
    lib = library.load("device_info")
    out = lib.ffi.new("cudalab_device_info *")
    lib.device_info_query(device, out)
    d = {"name": lib.ffi.string(out.name).decode(errors="replace")}
    for f in FIELDS:
        d[f] = getattr(out, f)
    d["compute_capability"] = f"{d['cc_major']}.{d['cc_minor']}"
    return d


def _fp32(quick: bool = False) -> bench.Ceiling:
    return bench.Ceiling("fp32", query(0)["fp32_tflops"], "TFLOP/s", "SMs x FP32 lanes x 2 x clock (device_info)")


def _fp32_inst(quick: bool = False) -> bench.Ceiling:
    return bench.Ceiling("fp32_inst", query(0)["fp32_inst_per_s"] / 1e9, "Ginst/s",
                         "SMs x FP32 lanes x clock (device_info)")


def ceilings() -> dict:
    """The bench's peak ceilings derived from this device's SM count and clock (device 0: under
    `invoke bench --gpus` each worker sees only its own GPU)."""
    return {"fp32": _fp32, "fp32_inst": _fp32_inst}


# --- the contract: what this program offers the lab (harness/programs/record.py) ----------------------

RECORD = Program(
    name='device_info',
    summary='what the GPU has: SMs, memory, limits, peaks',
    follows='intro course §1.4-1.6',
    order=20,
    ceilings=ceilings,
    run=run,
    parse_output=parse_output,
    tour=Tour("the GPU's properties and its FP32 and bandwidth peaks (text: `invoke run device_info`)"),
)
