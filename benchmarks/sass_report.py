#!/usr/bin/env python3
"""SASS instruction counts of the split-KV decode kernel, compiled for sm_90 without a GPU (the
figures in docs/benchmarks.md: instructions per loop iteration and registers per thread).

  python benchmarks/sass_report.py [D G RATIO BLOCK_H BLOCK_N WARPS BLOCK_SIZE SPLITS STAGES LLOYD]
  e.g. python benchmarks/sass_report.py 128 32 8 8 64 1 16 16 3     (the engine's launch for 32q/4kv)
  FOLD=1 python benchmarks/sass_report.py ...                          (the folded tile, common.py)
  MAXNREG=168 FOLD=1 ...                                               (a register cap, as decode_launch_config's)
  SHORT_N=32 MAXNREG=168 FOLD=1 ...                                    (short shares in 32-token tiles, as the engine's launch)
  SASS_DUMP=FILE ...                                                   (also write the whole SASS listing to FILE)
  KERNEL=merge python benchmarks/sass_report.py [D CHUNK]              (the merge kernel, pointers 16-byte aligned: registers, stack, calls)
  KERNEL=merge MERGE_SPLIT=8 MERGE_WARPS=1 ...                         (the merge as small batches launch it: D / 8 columns, one warp)
Each loop of more than 100 instructions is reported with its spill loads/stores (LDL/STL) and its
shared-memory instructions by full opcode; then the shared buffers' TTGIR encodings and a sha1 of
the SASS without addresses (copy this script into another tree to compare that tree's kernels).

Needs triton (3.6.0 is the H200 image's; the CI venv's 3.9.0 also works, counts differ a little; it
bundles ptxas and cuobjdump) and torch installed locally.
"""
import collections
import hashlib
import os
import re
import subprocess
import sys
import tempfile
sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])
import triton, triton.language as tl
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
from aphrodite_int2kv.kernels import decode as dec
from aphrodite_int2kv.int2.format import SlotLayout, LLOYD_MAX_LEVELS

def compile_split(D=128, G=32, ratio=8, block_h=16, block_n=64, warps=2, block_size=16, splits=16, stages=3,
                  lloyd=False):
    L = SlotLayout(D, G); lv = LLOYD_MAX_LEVELS
    sig = {"q_ptr": "*bf16", "stride_qb": "i32", "stride_qh": "i32", "cache_u8": "*u8", "cache_f16": "*fp16",
           "stride_cb": "i64", "stride_cs": "i32", "stride_ch": "i32", "block_table_ptr": "*i32", "stride_bt": "i32",
           "seq_lens_ptr": "*i32", "part_out_ptr": "*fp32", "part_lse_ptr": "*fp32", "qk_scale": "fp32", "num_programs": "i32", "num_slots": "i32", "batch_size": "i32", "head_len": "i32", "window_len": "i32"}
    cx = dict(BLOCK_SIZE=block_size, D=D, G=G, RATIO=ratio, TILES=triton.cdiv(ratio, block_h), NUM_Q_HEADS=32,
              BLOCK_H=block_h, BLOCK_N=block_n, OFF_V=L.v_codes, OFF_KS=L.k_scale, OFF_KZ=L.k_zero,
              OFF_VS=L.v_scale, OFF_VZ=L.v_zero, LLOYD=bool(lloyd), L0=lv[0], L1=lv[1], L2=lv[2], L3=lv[3], DOT=tl.float16, FAST=True,
              UPSTREAM_HEAD_MAP=False, FOLD=int(os.environ.get("FOLD", "0")),   # 2: rows on M
              TABLE_AHEAD=bool(int(os.environ.get("TABLE_AHEAD", "0"))),
              ODD_SHIFT=int(os.environ.get("ODD_SHIFT", L.odd_shift)))   # kernel parameter order
    # short shares in tiles of SHORT_N (decode_launch_config's short_n; 0: none)
    cx.update(PDL=False, AFTER_TAIL=False, SHORT_N=int(os.environ.get("SHORT_N") or 0),
              SHORT_UNITS=int(os.environ.get("SHORT_UNITS", "24")), TILE_MAJOR=bool(int(os.environ.get("TILE_MAJOR", "0"))))
    for k in cx: sig[k] = "constexpr"
    src = ASTSource(fn=dec._int2_decode_split_kernel, signature=sig, constexprs={(list(sig).index(k),): v for k, v in cx.items()},
                    attrs={(list(sig).index(k),): [["tt.divisibility", 16]] for k in ("q_ptr","stride_qb","stride_qh","cache_u8","cache_f16","stride_cb","stride_cs","stride_ch","block_table_ptr","seq_lens_ptr","part_out_ptr","part_lse_ptr")})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages, **({"maxnreg": int(os.environ["MAXNREG"])} if os.environ.get("MAXNREG") else {})})

def compile_merge(D=128, chunk=128):
    """The merge kernel, every pointer fp32 but seq_lens (int32) and out (bf16), every runtime int i32."""
    fn = dec._int2_decode_merge_kernel
    names = fn.arg_names
    # every constexpr as the H200 launches it (PDL on; short shares with SHORT_N=32)
    cx = {"D": D, "CHUNK": chunk, "BLOCK_N": 64, "PDL": True, "SHORT_N": int(os.environ.get("SHORT_N") or 0),
          "SHORT_UNITS": int(os.environ.get("SHORT_UNITS", "24")),
          "DC": D // int(os.environ.get("MERGE_SPLIT", "1"))}   # columns per merge program (int2_decode merge_split)
    sig = {n: ("constexpr" if n in cx else "*i32" if n == "seq_lens_ptr" else "*bf16" if n == "out_ptr"
               else "*fp32" if n.endswith("_ptr") else "i32") for n in names}
    # pointers 16-byte aligned, as torch allocates them (Triton specializes on that at launch)
    aligned = {(names.index(n),): [["tt.divisibility", 16]] for n in names if n.endswith("_ptr")}
    src = ASTSource(fn=fn, signature=sig, constexprs={(names.index(k),): v for k, v in cx.items()}, attrs=aligned)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": int(os.environ.get("MERGE_WARPS", "4"))})   # int2_decode merge_warps


def report(ck):
    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(ck.asm["cubin"])
        f.flush()
        sass = subprocess.run([cuobjdump, "--dump-sass", f.name], capture_output=True, text=True).stdout
        usage = subprocess.run([cuobjdump, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    ins, text = [], []
    for line in sass.splitlines():
        m = re.match(r"\s+/\*([0-9a-f]+)\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)(.*)", line)
        if m:
            ins.append((int(m.group(1), 16), m.group(3), m.group(4)))
            text.append(line.split("*/", 1)[1].strip())     # without the address: comparable across builds
    if os.environ.get("SASS_DUMP"):     # the whole listing, to read a loop's instructions in order
        with open(os.environ["SASS_DUMP"], "w") as out:
            out.write(sass)
    print(" ".join(re.findall(r"REG:\d+|STACK:\d+", usage)), "shared", ck.metadata.shared)
    # the shared-memory buffers the pipeliner and layout conversions use (TTGIR encodings)
    for enc in re.findall(r"^#shared\d* = .*$", ck.asm.get("ttgir", ""), re.M):
        print("  ", enc)
    for addr, op, rest in ins:       # the main loop: the backward branch
        t = re.search(r"0x([0-9a-f]+)", rest)
        if op == "BRA" and t and int(t.group(1), 16) < addr:
            body = [o.split(".")[0] for a, o, _ in ins if int(t.group(1), 16) <= a <= addr]
            c = collections.Counter(body)
            spills = f" ({c['LDL'] + c['STL']} LDL/STL)" if len(body) > 100 else ""
            print(f"loop: {len(body)} instructions{spills};", " ".join(f"{k}:{v}" for k, v in c.most_common(20)))
            # a block the loop skips with a forward branch (the folded tile's rescale, taken at a
            # program's first tile and then rarely): the count of the path that skips it
            lo, hi, skipped = int(t.group(1), 16), addr, set()
            for a, o, r in ins:
                f = re.search(r"0x([0-9a-f]+)", r)
                if len(body) > 100 and o == "BRA" and f and lo <= a < int(f.group(1), 16) <= hi:
                    block = [(b, ob, rb) for b, ob, rb in ins if a < b < int(f.group(1), 16)]
                    if not any(ob == "BRA" and re.search(r"0x([0-9a-f]+)", rb)
                               and int(re.search(r"0x([0-9a-f]+)", rb).group(1), 16) < b for b, ob, rb in block):
                        skipped |= {b for b, _, _ in block}     # not a block holding an inner loop
            if skipped:
                fast = collections.Counter(o.split(".")[0] for a, o, _ in ins if lo <= a <= hi and a not in skipped)
                print(f"  skipping its forward branches: {sum(fast.values())} instructions;",
                      " ".join(f"{k}:{v}" for k, v in fast.most_common(20)))
            if len(body) > 100:     # shared-memory traffic of the loop, by full opcode (width, ldmatrix)
                sh = collections.Counter(o for a, o, _ in ins if int(t.group(1), 16) <= a <= addr
                                         and re.match(r"(LDS|STS|LDSM|STSM|LDGSTS)\b|(LDS|STS|LDSM|STSM|LDGSTS)\.", o))
                print("  shared ops:", " ".join(f"{k}:{v}" for k, v in sh.most_common()))
    # sha1 of the SASS without addresses: two trees compile to the same code iff it matches
    digest = hashlib.sha1("\n".join(text).encode()).hexdigest()[:16]
    print("whole kernel:", len(ins), "instructions,", sum(op.startswith("CALL") for _, op, _ in ins), "CALL,",
          "SASS sha1", digest)


if __name__ == "__main__":
    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        print(__doc__)
        sys.exit(0)
    args = [int(a) for a in sys.argv[1:]]
    report(compile_merge(*args) if os.environ.get("KERNEL") == "merge" else compile_split(*args))
