"""The swap-AB kernel's and the GEMM's sm_90 SASS, compiled here without a GPU (benchmarks/kernels_sass.py):
MXFP4's decoded weight must reach the dot in registers, as NVFP4's does. A tl.max over the scales once sent
it through shared memory (16 STS.128 and 32 LDS.64 more a K step, 1.13-1.22x slower at M = 8)."""

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

TOOL = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "kernels_sass.py"


def _loops(kernel, *args) -> dict[str, str]:
    """benchmarks/kernels_sass.py --kernel KERNEL's line for each format, compiled for sm_90 here."""
    spec = importlib.util.find_spec("triton")  # not imported here: onnxfuse.kernels must come first in-process
    if spec is None:
        pytest.skip("needs triton")
    if not os.path.exists(os.path.join(spec.submodule_search_locations[0], "backends", "nvidia", "bin", "nvdisasm")):
        pytest.skip("this triton wheel ships no nvdisasm")
    # its own process: triton.jit makes interpreted functions when TRITON_INTERPRET=1 at import
    run = subprocess.run([sys.executable, str(TOOL), "--kernel", kernel, *args],
                         env={**os.environ, "TRITON_INTERPRET": "0"}, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    return dict(line.split(" (", 1) for line in run.stdout.strip().splitlines())


def test_mxfp4_scale_w_loop_keeps_the_decoded_weight_out_of_shared_memory():
    lines = _loops("mma", "--formats", "mxfp4,nvfp4")
    assert set(lines) == {"mxfp4", "nvfp4"}, lines
    for fmt, line in lines.items():
        assert "K loop of" in line, line
        assert "STS.128" not in line and "LDS.64" not in line, f"{fmt}: {line}"


@pytest.mark.parametrize("warps", [4, 8])
def test_wide_programs_compile_to_mma_sync_with_the_weight_in_registers(warps):
    """4 and 8 warps compile to mma.sync under triton_env.mma_sync_dots, as _launch compiles them: as
    wgmma, Triton read the decoded weight back from shared memory 16 bits at a time (LDS.U16)."""
    lines = _loops("mma", "--formats", "nvfp4,int4", "--m", "16", "--warps", str(warps))
    assert set(lines) == {"nvfp4", "int4"}, lines
    for fmt, line in lines.items():
        assert "mma.sync 32;" in line, f"{fmt}: {line}"  # 16 rows x 16 columns x 2 dots of 64 bytes, a warp
        assert not any(op in line for op in ("STS", "LDS.64", "LDS.U16")), f"{fmt}: {line}"


def test_natural_k_gemm_copies_a_as_it_lies_and_overlaps_its_wgmmas():
    """The W @ A^T tiles of dequant_matmul.natural_k_configs: A's tile reaches shared memory by
    cp.async alone (by sub-position it is split in registers and stored again, STS.64), and no wgmma
    of the K loop waits for the one before it (WARPGROUP.DEPBAR gsb0 0x0, which a tl.trans of the
    accumulator before the store, or 64-code steps over block-32 E8M0 scales, brought back)."""
    formats = {"int4", "nvfp4", "mxfp4", "mxfp8"}
    lines = _loops("gemm", "--formats", ",".join(sorted(formats)), "--natural-k")
    assert set(lines) == formats, lines
    for fmt, line in lines.items():
        assert "; waits 0x" in line and "0x0" not in line, f"{fmt}: {line}"  # triton 3.6: 0x3 or 0x1, 3.9: 0x1
        assert "STS.64" not in line, f"{fmt}: {line}"


def test_w_at_a_t_decodes_integer_fp8_and_nvfp4_codes_in_fp16_lanes():
    """The large-M W @ A^T candidates with fp16 A scale their codes with packed fp16 ops: int4 with
    fp16 scales and NVFP4 decoded in fp16 lanes (dequant_matmul.fp16_lane_codes), fp8 by the GPU's
    e4m3 conversion (then the compiler multiplies in fp16 itself). No float32 multiply in the K loop:
    fp8's was 543 instructions through the bit-level decode and float32 (triton 3.6), 171 now."""
    lines = _loops("gemm", "--formats", "int4,fp8,nvfp4")
    assert set(lines) == {"int4", "fp8", "nvfp4"}, lines
    for fmt, line in lines.items():
        assert "; FMUL 0;" in line, f"{fmt}: {line}"
