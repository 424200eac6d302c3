#!/usr/bin/env python3
"""How fast the split-KV decode's *structure* streams the cache, without its attention math (GPU).

A diagnostic, not a kernel anyone runs: it builds, in a temporary directory, a copy of this tree's
`aphrodite_int2kv` package renamed `int2kv_floor` whose folded tile (`folded.int2_tile_folded`)
keeps an eighth of its math: one K plane dotted with the query, one half-plane of V with the
result, the metadata summed, no softmax (the dots keep the loads on the shipped path: async copies
into shared memory, read back for the tensor cores). Everything else is the shipped launch: the same
deal, prologue (lengths, query rounding, block table), pipelined loads of every tile, partial
results and merge. Both are timed in one process on the same pages (CUDA-graph replays, L2
flushed, each side twice, the second pass in reverse order), and reported as % of the device's
copy bandwidth (decode_attention.py's figure). The floor's output is not attention: it is not
checked, only timed.

  python3 benchmarks/decode_floor.py --contexts 32768,131072 --batches 8,32 --out $OUT/decode_floor.json

What it tells: the floor's time is what the launch costs with most of the tile's math taken out
(`FLOOR=1 SHORT_N=32 MAXNREG=168 FOLD=1 TABLE_AHEAD=1 python benchmarks/sass_report.py 128 64 8 8 64 1 128 16 3`
counts what stays: 223 instructions per 32-token tile, 116 registers, against 488 and 160). Shipped minus floor is
about what the math adds; the floor against the copy figure, what the start, the deal, the loads
and the merge cost on their own.
"""
import argparse
import pathlib
import statistics
import sys

import torch

sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])
from benchmarks.decode_ab import paged_batch, time_abba  # noqa: E402
from benchmarks.decode_attention import Timer, copy_bandwidth, gpu_state, log, write_sweep  # noqa: E402
from benchmarks.package_copy import import_copy, renamed_copy  # noqa: E402
from aphrodite_int2kv.int2.format import SlotLayout  # noqa: E402
from aphrodite_int2kv.kernels import decode as shipped  # noqa: E402

FLOOR_TILE = '''@triton.jit
def int2_tile_folded(m_i, l_i, e0, o0, e1, o1, e2, o2, e3, o3, zs, q0, q1, q2, q3, qsums, qscale,
                     kbytes, vwords, k_scale, k_zero, v_scale, v_zero, nmask,
                     ROWS: tl.constexpr, N: tl.constexpr, W: tl.constexpr, G: tl.constexpr, NG: tl.constexpr,
                     DOT: tl.constexpr, FAST: tl.constexpr):
    """benchmarks/decode_floor.py: one of the tile's four K planes dotted with the query and one of
    V's eight half-planes with the result (so the loads stay on the shipped tile's path: async
    copies into shared memory, read back for the tensor cores), the metadata summed; no softmax."""
    d = tl.dot(k_codes(kbytes, 0, 0, W, G, FAST), tl.trans(q0), out_dtype=tl.int32)       # [N, ROWS]
    meta = tl.sum(k_scale.to(tl.float32) + k_zero.to(tl.float32) + v_scale.to(tl.float32) + v_zero.to(tl.float32),
                  axis=1)
    p = tl.where(nmask[:, None], d.to(tl.float32) + meta[:, None], 0.0).to(DOT)
    ev, od = raw_v_pairs(vwords, 0, FAST)
    e0 = tl.dot(ev.to(DOT), p, e0)
    return m_i, l_i + qscale, e0, o0, e1, o1, e2, o2, e3, o3, zs


'''


def replace_tile(folded: pathlib.Path):
    """A package copy's kernels/folded.py with FLOOR_TILE in place of its int2_tile_folded
    (also used by decode_timeline.py --floor)."""
    text = folded.read_text()
    start = text.index("@triton.jit\ndef int2_tile_folded(")
    end = text.index("@triton.jit", start + 1)
    folded.write_text(text[:start] + FLOOR_TILE + text[end:])


def floor_package():
    """This tree's package copied as int2kv_floor (benchmarks/package_copy.py), its folded tile
    replaced; returns its kernels.decode."""
    pkg = renamed_copy("int2kv_floor")
    replace_tile(pkg / "kernels" / "folded.py")
    return import_copy(pkg)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="32/4/128,16/2/256", help="Hq/Hkv/D,...")
    ap.add_argument("--contexts", default="32768,131072")
    ap.add_argument("--batches", default="8,32")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out", default="decode_floor.json")
    args = ap.parse_args()
    floor = floor_package()
    timer = Timer(graph=True)
    copy_gbps = copy_bandwidth(timer)
    log(f"copy bandwidth {copy_gbps:.0f} GB/s")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    G, BS = 64, 128
    rows = []
    for cfg in args.configs.split(","):
        Hq, Hkv, D = map(int, cfg.split("/"))
        L = SlotLayout(D, G)
        for S in map(int, args.contexts.split(",")):
            for B in map(int, args.batches.split(",")):
                cache, table, seq = paged_batch(L, [S] * B, BS, Hkv, heads_first=True)
                q = torch.randn(B, Hq, D, device="cuda").to(torch.bfloat16)
                launch = shipped.decode_launch_config(B, Hkv, Hq // Hkv, D, sms)
                sides = {"shipped": shipped.int2_decode, "floor": floor.int2_decode}
                calls = {name: (lambda fn=fn: fn(q, cache, table, seq, L, D ** -0.5, launch.num_splits,
                                                 **launch.kwargs()))
                         for name, fn in sides.items()}
                timed = time_abba(timer, calls, args.iters)
                nbytes = B * S * Hkv * L.slot_bytes
                us = {name: statistics.mean(t) for name, t in timed.items()}
                frac = {name: nbytes / u / 1e3 / copy_gbps for name, u in us.items()}
                rows.append(dict(num_q_heads=Hq, num_kv_heads=Hkv, head_dim=D, context_len=S, batch=B, group_size=G,
                                 block_size=BS, num_splits=launch.num_splits, launch=launch.kwargs(),
                                 shipped_us=round(us["shipped"], 2), floor_us=round(us["floor"], 2),
                                 us_passes={k: [round(x, 2) for x in v] for k, v in timed.items()},
                                 int2_bytes_read=nbytes, copy_GBps=round(copy_gbps, 1),
                                 shipped_frac_copy=round(frac["shipped"], 3), floor_frac_copy=round(frac["floor"], 3),
                                 copy_time_us=round(nbytes / copy_gbps / 1e3, 2), gpu_state=gpu_state()))
                log(f"Hq{Hq}/kv{Hkv}/D{D} S={S} B={B}: shipped {us['shipped']:.1f} us ({frac['shipped']:.0%} of copy), "
                    f"floor {us['floor']:.1f} us ({frac['floor']:.0%}); copy time {nbytes / copy_gbps / 1e3:.1f} us")
                del cache
                torch.cuda.empty_cache()
    write_sweep(args.out, rows)


if __name__ == "__main__":
    main()
