"""Static SASS profile of the DequantMatMul GEMV, compiled for sm_90 without a GPU.

    TRITON_INTERPRET=0 python benchmarks/kernels_sass.py [--formats int4,int8,fp8,mxfp4,nvfp4]
                                                          [--tile 32x256] [--warps 4] [--loop-stages 1]

Compiles dqmm_gemv_kernel (M = 1) with Triton's own ptxas, disassembles it with nvdisasm and prints
the instruction mix and the instructions per weight byte (kernel total / bytes one thread loads per K
step: the loop dominates). At 4.05 TB/s an H200 issues about 8.3 thread-instructions per weight byte
(132 SMs x 4 schedulers x 1.98 GHz x 32 lanes / 4.05e12 B/s), so a GEMV above that is issue-bound.
Pointer and size arguments are specialised as divisible by 16, as Triton does at a real launch.
"""

from __future__ import annotations

import argparse
import collections
import inspect
import os
import re
import subprocess
import sys
import tempfile

# name: (WFMT, BITS, codes per byte, FLIP, ACT_BASE, ACT_SHIFT, block size, SFMT)
FORMATS = {
    "int4": (2, 4, 2, 0x88, 1.0, 4, 32, 1),
    "int8": (4, 8, 1, 0x80, 1.0, 8, 128, 1),
    "fp8": (6, 8, 1, 0, 1.0, 0, 128, 1),
    "mxfp4": (8, 4, 2, 0, 16384.0, 0, 32, 3),
    "nvfp4": (8, 4, 2, 0, 16384.0, 0, 16, 4),
}
INT_ARGS = ["M", "N", "K", "Kb", "G", "stride_am", "stride_wn", "stride_sn", "stride_zn", "stride_om", "kb_per_split"]
ALIGNED = ["a_ptr", "w_ptr", "s_ptr", "z_ptr", "gs_ptr", "bias_ptr", "out_ptr", "ws_ptr", "N", "K", "Kb", "stride_am",
           "stride_wn", "stride_zn", "stride_om", "kb_per_split"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--formats", default=",".join(FORMATS))
    p.add_argument("--tile", default="32x256", help="BLOCK_N x BLOCK_KB")
    p.add_argument("--warps", type=int, default=4)
    p.add_argument("--loop-stages", type=int, default=1)
    args = p.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("run with TRITON_INTERPRET=0 (this compiles for sm_90; nothing is launched)")
        return 2
    os.environ["TRITON_INTERPRET"] = "0"
    from onnxfuse.kernels import triton_env

    triton_env.load()
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from onnxfuse.kernels.dequant_gemv_kernel import dqmm_gemv_kernel as fn

    bn, bkb = (int(v) for v in args.tile.split("x"))
    names = list(inspect.signature(fn.fn).parameters)
    nvdisasm = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
    for fname in args.formats.split(","):
        wfmt, bits, cpb, flip, base, shift, bs, sfmt = FORMATS[fname]
        bsb = min(bs // cpb, bkb)
        const = dict(WFMT=wfmt, SFMT=sfmt, BITS=bits, CPB=cpb, BS=bs, FLIP=flip, HAS_ZP=False,
                     HAS_GS=fname == "nvfp4", HAS_BIAS=False, BLOCK_M=1, BLOCK_N=bn, NG=bkb // bsb, BSB=bsb,
                     USE_WS=False, HW_FP8=True, ACT_BASE=base, ACT_SHIFT=shift, LOOP_STAGES=args.loop_stages)
        sig = {"a_ptr": "*fp16", "w_ptr": "*u8", "s_ptr": "*fp16" if sfmt == 1 else "*u8", "z_ptr": "*u8",
               "gs_ptr": "*fp32", "bias_ptr": "*fp16", "out_ptr": "*fp16", "ws_ptr": "*fp32"}
        sig.update({n: "i32" for n in INT_ARGS})
        sig.update({n: "constexpr" for n in const})
        attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in ALIGNED}
        k = triton.compile(ASTSource(fn, sig, const, attrs), target=GPUTarget("cuda", 90, 32),
                           options=dict(num_warps=args.warps, num_stages=3))
        with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
            f.write(k.asm["cubin"])
        sass = subprocess.run([nvdisasm, "-c", f.name], capture_output=True, text=True, check=True).stdout
        os.unlink(f.name)
        ops = [o.split(".")[0] for o in re.findall(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)", sass, re.M)]
        per_thread = bn * bkb // (32 * args.warps)
        mix = ", ".join(f"{op} {n}" for op, n in collections.Counter(ops).most_common(10))
        print(f"{fname}: {len(ops)} SASS instructions, {per_thread} weight bytes per thread per K step: "
              f"{len(ops) / per_thread:.1f} instr/byte (upper bound); cp.async {k.asm['ptx'].count('cp.async.c')}; "
              f"{mix}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
