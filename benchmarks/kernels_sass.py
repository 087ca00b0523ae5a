"""Static SASS profile of the DequantMatMul GEMV, compiled for sm_90 without a GPU.

    TRITON_INTERPRET=0 python benchmarks/kernels_sass.py [--formats int4,int8,fp8,mxfp4,nvfp4]
                                                          [--tile 32x256] [--warps 4] [--loop-stages 1]
    TRITON_INTERPRET=0 python benchmarks/kernels_sass.py --kernel mma [--formats int4,mxfp4,nvfp4] [--m 4]
                                                          [--chunk 64] [--step 128] [--ragged] [--row-tiles 2]
    TRITON_INTERPRET=0 python benchmarks/kernels_sass.py --kernel gemm [--formats int4,int8,nvfp4] [--natural-k]
                                                          [--block-m 128]

Compiles dqmm_gemv_kernel (M = 1) with Triton's own ptxas, disassembles it with nvdisasm and prints
the instruction mix and the instructions per weight byte (kernel total / bytes one thread loads per K
step: the loop dominates). At 4.05 TB/s an H200 issues about 8.3 thread-instructions per weight byte
(132 SMs x 4 schedulers x 1.98 GHz x 32 lanes / 4.05e12 B/s), so a GEMV above that is issue-bound.
Arguments are specialised as Triton does at a real launch: pointers and sizes as divisible by 16, and
the scale's row stride as the constant 1 (a session loads scales column-major, kernels/constant_layout.py):
without it the scale loads of each K step compile to scalar LDGs where the launched kernel streams them
through cp.async with the weight.

`--kernel mma` compiles the swap-AB kernel (dqmm_mma_kernel) with the SCALE_W config the autotuner
picks at M = 4-16 (BLOCK_N 32, 64-byte dots, two a K step, 2 warps, LOOP_STAGES 3; `--chunk` and
`--step` for the other dot and step sizes it times; `--ragged` for the masked loop of shapes that are
not whole tiles; `--warps 4` or 8 for the wider programs, 16 rows a warp, compiled to mma.sync as
the launch does) and prints its main loop: instruction count, tensor-core and shared-memory
instructions (a decoded weight that reaches the dot through shared memory shows up as STS.128 /
LDS.64 there).

`--kernel gemm` compiles the large-M GEMM as W @ A^T (dqmm_gemm_kernel, SWAP_AB) with the tile the
autotuner's candidates have (`--natural-k`: a tile of dequant_matmul.natural_k_configs; `--block-m 256`
for its other one) and prints its K loop: wgmma (HGMMA) count, the waits between them
(`WARPGROUP.DEPBAR.LE gsb0, N`: N = 0 serialises each wgmma behind the last), its float32 multiplies
(none where the codes are decoded in fp16 lanes, F16_CODES) and the shared-memory instructions
(STS.64: A's tile split in registers and stored again).
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
    "mxfp4": (8, 4, 2, 0, 64.0, 0, 32, 3),  # ACT_BASE 2^6: the GPU's fp4 decode through e4m3
    "nvfp4": (8, 4, 2, 0, 64.0, 0, 16, 4),
}
# name: (WFMT, BITS, SFMT, block size) for the swap-AB kernel's SCALE_W path (fp16 scales for int4)
MMA_FORMATS = {"int4": (2, 4, 1, 32), "mxfp4": (8, 4, 3, 32), "nvfp4": (8, 4, 4, 16), "mxfp8": (6, 8, 3, 32)}
# name: (weight format, scale format, block size) for the GEMM
GEMM_FORMATS = {"int4": ("int4", "float16", 32), "int8": ("int8", "float16", 128), "int2": ("int2", "float16", 32),
                "mxfp4": ("float4e2m1", "float8e8m0", 32), "nvfp4": ("float4e2m1", "float8e4m3fn", 16),
                "mxfp8": ("float8e4m3fn", "float8e8m0", 32), "fp8": ("float8e4m3fn", "float16", 128)}
COLUMN_MAJOR_SCALES = {"stride_sn": 1}  # an integer argument equal to 1 is a constant at a launch
ALIGNED = ["a_ptr", "w_ptr", "s_ptr", "z_ptr", "gs_ptr", "bias_ptr", "out_ptr", "ws_ptr", "N", "K", "Kb", "stride_am",
           "stride_wn", "stride_sg", "stride_om", "kb_per_split"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--formats", help=f"default: {','.join(FORMATS)} (gemv), {','.join(MMA_FORMATS)} (mma)")
    p.add_argument("--tile", default="32x256", help="BLOCK_N x BLOCK_KB of the gemv")
    p.add_argument("--warps", type=int,
                   help="of the gemv (default 4) or the mma kernel (default 2); the gemm takes its config's")
    p.add_argument("--loop-stages", type=int, default=1, help="of the gemv (mma: 3)")
    p.add_argument("--kernel", choices=("gemv", "mma", "gemm"), default="gemv")
    p.add_argument("--m", type=int, default=4, help="BLOCK_M of the mma kernel")
    p.add_argument("--chunk", type=int, default=64, help="bytes a dot of the mma kernel")
    p.add_argument("--step", type=int, default=128, help="bytes a K step of the mma kernel (NDOT = step / chunk)")
    p.add_argument("--ragged", action="store_true", help="the mma kernel's masked K loop (N or K not a whole tile)")
    p.add_argument("--row-tiles", type=int, default=1, choices=(1, 2, 4),
                   help="row tiles of BLOCK_N a program of the mma kernel owns (ROW_TILES)")
    p.add_argument("--natural-k", action="store_true", help="the gemm's weight operand in the row's K order")
    p.add_argument("--block-m", type=int, default=128, help="rows of A a program of the gemm owns (128 or 256)")
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

    def compile_sm90(fn, const, sfmt, warps, stages=None):
        const = dict(const, **COLUMN_MAJOR_SCALES)
        return triton.compile(ASTSource(fn, _signature(fn, const, sfmt), const, _aligned(fn)),
                              target=GPUTarget("cuda", 90, 32),
                              options=dict(num_warps=warps, num_stages=stages or (3 if args.kernel == "gemv" else 1)))

    if args.kernel == "mma":
        return _mma(args, compile_sm90, triton)
    if args.kernel == "gemm":
        return _gemm(args, compile_sm90, triton)
    from onnxfuse.kernels.dequant_gemv_kernel import dqmm_gemv_kernel as fn

    bn, bkb = (int(v) for v in args.tile.split("x"))
    warps = args.warps or 4
    for fname in (args.formats or ",".join(FORMATS)).split(","):
        wfmt, bits, cpb, flip, base, shift, bs, sfmt = FORMATS[fname]
        bsb = min(bs // cpb, bkb)
        const = dict(WFMT=wfmt, SFMT=sfmt, BITS=bits, CPB=cpb, BS=bs, FLIP=flip, HAS_ZP=False,
                     HAS_GS=fname == "nvfp4", HAS_BIAS=False, BLOCK_M=1, BLOCK_N=bn, NG=bkb // bsb, BSB=bsb,
                     USE_WS=False, HW_FP8=True, ACT_BASE=base, ACT_SHIFT=shift, LOOP_STAGES=args.loop_stages)
        k = compile_sm90(fn, const, sfmt, warps)
        sass = _sass(k, triton)
        ops = [o.split(".")[0] for o in re.findall(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)", sass, re.M)]
        per_thread = bn * bkb // (32 * warps)
        mix = ", ".join(f"{op} {n}" for op, n in collections.Counter(ops).most_common(10))
        print(f"{fname}: {len(ops)} SASS instructions, {per_thread} weight bytes per thread per K step: "
              f"{len(ops) / per_thread:.1f} instr/byte (upper bound); cp.async {k.asm['ptx'].count('cp.async.c')}; "
              f"{mix}", flush=True)
    return 0


def _signature(fn, const, sfmt) -> dict:
    """Triton types of the kernel's arguments: fp16 A, uint8 codes, the scale's storage, int32 sizes."""
    ptrs = {"a_ptr": "*fp16", "w_ptr": "*u8", "s_ptr": "*fp16" if sfmt == 1 else "*u8", "z_ptr": "*u8",
            "gs_ptr": "*fp32", "bias_ptr": "*fp16", "out_ptr": "*fp16", "ws_ptr": "*fp32"}
    return {n: "constexpr" if n in const else ptrs.get(n, "i32") for n in inspect.signature(fn.fn).parameters}


def _aligned(fn) -> dict:
    names = list(inspect.signature(fn.fn).parameters)
    return {(names.index(n),): [["tt.divisibility", 16]] for n in ALIGNED}


def _sass(k, triton) -> str:
    nvdisasm = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(k.asm["cubin"])
    try:
        return subprocess.run([nvdisasm, "-c", f.name], capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(f.name)


def _main_loop(sass: str) -> list[str]:
    """The instructions of the longest backward-branch loop holding an HMMA or HGMMA (the K loop)."""
    labels, ins = {}, []
    for line in sass.splitlines():
        m = re.match(r"^\s*(\.L_x_\d+):", line)
        if m:
            labels[m.group(1)] = len(ins)
        elif m := re.match(r"^\s+/\*[0-9a-f]+\*/\s+(.*)$", line):
            ins.append(re.sub(r"^@!?U?P\w+\s+", "", m.group(1)))
    best = []
    for i, t in enumerate(ins):
        m = re.search(r"BRA\s+`?\(?(\.L_x_\d+)", t)
        if m and labels.get(m.group(1), i) < i:
            body = ins[labels[m.group(1)]:i + 1]
            if any(b.startswith(("HMMA", "HGMMA")) for b in body) and len(body) > len(best):
                best = body
    return best


def _mma(args, compile_sm90, triton) -> int:
    import contextlib

    from onnxfuse.kernels import triton_env
    from onnxfuse.kernels.decode_ptx import FP4_E4M3_EXP
    from onnxfuse.kernels.dequant_matmul import _mma_sync
    from onnxfuse.kernels.dequant_mma_kernel import dqmm_mma_kernel as fn

    warps = args.warps or 2

    for fname in (args.formats or ",".join(MMA_FORMATS)).split(","):
        if fname not in MMA_FORMATS:
            print(f"{fname}: no SCALE_W swap-AB case (choose from {', '.join(MMA_FORMATS)})")
            return 2
        wfmt, bits, sfmt, bs = MMA_FORMATS[fname]
        ndot = args.step // args.chunk
        const = dict(WFMT=wfmt, SFMT=sfmt, BITS=bits, CPB=8 // bits, BS=bs, HAS_ZP=False, HAS_GS=fname == "nvfp4",
                     HAS_BIAS=False, BLOCK_M=args.m, BLOCK_N=16 * warps, CHUNK=args.chunk, GROUP=1, NDOT=ndot, USE_WS=True,
                     ASM=True, HW_FP8=True, ACT_PAIRS=bits == 4, DECODE_EXP=FP4_E4M3_EXP if wfmt == 8 else 0,
                     DOT_F32=False, LOOP_STAGES=3, SCALE_W=True, EVEN=not args.ragged,
                     ROW_TILES=args.row_tiles)
        with triton_env.mma_sync_dots() if _mma_sync(dict(MMA=True, num_warps=warps)) else contextlib.nullcontext():
            loop = _main_loop(_sass(compile_sm90(fn, const, sfmt, warps), triton))
        ops = collections.Counter(b.split()[0] for b in loop)
        shared = {op: n for op, n in ops.items() if re.match(r"(STS|LDS)", op)}
        dots = sum(n for op, n in ops.items() if op.startswith("HMMA"))
        print(f"{fname} (M <= {args.m}): K loop of {len(loop)} SASS instructions ({ndot} {args.chunk}-byte dots, "
              f"{warps} warps); mma.sync {dots}; shared memory: {', '.join(f'{op} {n}' for op, n in sorted(shared.items()))}",
              flush=True)
    return 0


def _gemm(args, compile_sm90, triton) -> int:
    import importlib

    import torch

    from onnxfuse.kernels import inputs
    from onnxfuse.kernels.dequant_matmul_kernels import dqmm_gemm_kernel as fn

    D = importlib.import_module("onnxfuse.kernels.dequant_matmul")  # the module (the package exports a function)

    cpu = torch.device("cpu")
    for fname in (args.formats or "int4,int8,nvfp4").split(","):
        if fname not in GEMM_FORMATS:
            print(f"{fname}: choose from {', '.join(GEMM_FORMATS)}")
            return 2
        wf, sf, bs = GEMM_FORMATS[fname]
        e, sc = inputs.formats(wf, sf)
        kb = 8192 // e.codes_per_byte
        if args.natural_k:  # the tiles benchmarks/kernels_gemm.py times, as _launch compiles them
            cfgs = D.natural_k_configs(1024, 28672, kb, e, cpu, block_size=bs, scale_code=sc)
        else:
            cfgs = [c for c in D.gemm_candidates(1024, 28672, kb, e, cpu) if c.get("SWAP_AB")]
        cfg = next((c for c in cfgs if c["BLOCK_M"] == args.block_m), None)
        if cfg is None:
            print(f"{fname}: no such tile with BLOCK_M {args.block_m}: {sorted({c['BLOCK_M'] for c in cfgs})}")
            return 2
        ng, bsb = D._tile_shape(e, bs, cfg["BLOCK_KB"])  # as _launch views the K step
        const = dict(WFMT=e.id, SFMT=sc.id, BITS=e.bits, CPB=e.codes_per_byte, BS=bs, HAS_ZP=False,
                     HAS_GS=fname == "nvfp4", HAS_BIAS=False, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
                     NG=ng, BSB=bsb, ATOMIC=False, GROUP_M=cfg["GROUP_M"], DOT_F32=False,
                     SWAP_AB=True, F16_CODES=D.fp16_lane_codes(e, sc), NATURAL_K=args.natural_k, HW_FP8=True)
        loop = _main_loop(_sass(compile_sm90(fn, const, sc.id, cfg["num_warps"], cfg["num_stages"]), triton))
        ops = collections.Counter(b.split()[0] for b in loop)
        waits = collections.Counter(re.search(r"gsb0, (0x[0-9a-f]+)", b).group(1)
                                    for b in loop if b.startswith("WARPGROUP.DEPBAR"))
        shared = {op: n for op, n in ops.items() if re.match(r"(STS|LDS)", op)}
        print(f"{fname} (natural K: {args.natural_k}): K loop of {len(loop)} SASS instructions "
              f"({cfg['num_warps']} warps, {cfg['BLOCK_M']}x{cfg['BLOCK_N']} tile, {cfg['BLOCK_KB']} bytes a step)"
              f"; wgmma {sum(n for op, n in ops.items() if op.startswith('HGMMA'))}; FMUL {ops.get('FMUL', 0)}; "
              f"waits {', '.join(f'{w} x{n}' for w, n in sorted(waits.items()))}; "
              f"shared memory: {', '.join(f'{op} {n}' for op, n in sorted(shared.items()))}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
