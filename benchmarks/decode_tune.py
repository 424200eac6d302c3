#!/usr/bin/env python3
"""Launch-shape sweep of the int2 split-KV decode at the engine's page size (128) and default
group size (64), timed as CUDA-graph replays: split count (programs per multiprocessor, rounded
down so the grid never starts a partial extra wave) x block_n / num_warps / num_stages / register
cap. Every variant is first checked against the torch reference on short sequences.

  python3 benchmarks/decode_tune.py --out decode_tune_h200.json
  python3 benchmarks/decode_tune.py --fold --variants 64/1/3,32/1/3,64/2/3 --per-sm 8,16   (the folded tile)
  python3 benchmarks/decode_tune.py --fold --table-ahead --variants 64/1/4,128/2/3 --per-sm 8,16
"""
import argparse
import math
import sys

import torch

sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])
from benchmarks.decode_attention import Timer, log, random_int2_cache, write_sweep  # noqa: E402
from aphrodite_int2kv.int2 import reference as R  # noqa: E402
from aphrodite_int2kv.int2.format import SlotLayout  # noqa: E402
from aphrodite_int2kv.kernels.decode import block_h_for, int2_decode  # noqa: E402

SHAPES = [(32, 4, 128, 8), (32, 4, 128, 32), (32, 4, 128, 64), (32, 8, 128, 8), (32, 8, 128, 32),
          (16, 2, 256, 8), (16, 2, 256, 32)]
VARIANTS = [(64, 1, 3, None), (64, 1, 3, 168), (64, 1, 2, None), (32, 1, 3, None), (64, 2, 3, None)]


def parse_variant(text: str):
    """block_n/num_warps/num_stages[/maxnreg] (maxnreg 0 or left out: no cap). (Session 8's run also
    took a fifth field, prefetch, for a hand-pipelined loop since dropped: commit 8e71627.)"""
    f = [int(x) for x in text.split("/")]
    return (f[0], f[1], f[2], f[3] if len(f) > 3 and f[3] else None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--context", type=int, default=32768)
    ap.add_argument("--per-sm", default="8,12,16,24", help="programs per multiprocessor to try")
    ap.add_argument("--iters", type=int, default=15)
    ap.add_argument("--fold", action="store_true", help="the folded tile (int2_decode(fold=True)) instead")
    ap.add_argument("--table-ahead", action="store_true", help="block-table entries a tile ahead (table_ahead=True)")
    ap.add_argument("--variants", default=None,
                    help="block_n/num_warps/num_stages[/maxnreg],... instead of the built-in list")
    ap.add_argument("--out", default="decode_tune_h200.json")
    args = ap.parse_args()
    timer = Timer(graph=True)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    S, BS, G = args.context, 128, 64
    rows = []
    for Hq, Hkv, D, B in SHAPES:
        L = SlotLayout(D, G)
        blocks = B * math.ceil(S / BS)
        cache = random_int2_cache(L, blocks, BS, Hkv)
        table = torch.randperm(blocks, device="cuda").int().view(B, -1)
        seq = torch.full((B,), S, dtype=torch.int32, device="cuda")
        short = torch.full((B,), 3000, dtype=torch.int32, device="cuda")
        q = torch.randn(B, Hq, D, device="cuda", dtype=torch.bfloat16)
        ref = R.decode_reference(q[:2].float(), cache, table[:2], short[:2], L, D ** -0.5)
        bh = block_h_for(Hq // Hkv)
        per_split = B * Hkv * math.ceil(Hq // Hkv / bh)
        line = []
        for per_sm in map(int, args.per_sm.split(",")):
            splits = max(1, min(256, per_sm * sms // per_split))
            variants = VARIANTS if not args.variants else \
                [parse_variant(v) for v in args.variants.split(",")]
            for bn, nw, ns, reg in variants:
                kw = dict(block_n=bn, num_warps=nw, num_stages=ns, block_h=bh, maxnreg=reg, fold=args.fold,
                          table_ahead=args.table_ahead)
                try:
                    got = int2_decode(q, cache, table, short, L, D ** -0.5, splits, **kw)[:2].float()
                    err = (got - ref).abs().max().item()
                    if not err < 2e-2:
                        raise AssertionError(f"max error {err:.3g} vs reference")
                    us = timer.median_us(lambda: int2_decode(q, cache, table, seq, L, D ** -0.5, splits, **kw),
                                         iters=args.iters)
                except Exception as exc:  # noqa: BLE001 - a sweep: report and go on
                    log(f"    {bn}/{nw}/{ns}/{reg}: {str(exc).splitlines()[0][:120]}")
                    us = float("nan")
                rows.append(dict(num_q_heads=Hq, num_kv_heads=Hkv, head_dim=D, batch=B, context_len=S,
                                 group_size=G, block_size=BS, per_sm=per_sm, num_splits=splits, block_n=bn,
                                 num_warps=nw, num_stages=ns, maxnreg=reg, fold=args.fold,
                                 table_ahead=args.table_ahead, int2_us=round(us, 2)))
                line.append(f"{per_sm}:{splits}:{bn}/{nw}/{ns}/{reg}={us:.0f}")
        best = min((r for r in rows[-len(line):] if r["int2_us"] == r["int2_us"]), key=lambda r: r["int2_us"])
        log(f"Hq{Hq}/kv{Hkv}/D{D} B={B}: " + " ".join(line))
        log(f"  best: per_sm {best['per_sm']} splits {best['num_splits']} {best['block_n']}/{best['num_warps']}/"
            f"{best['num_stages']}/{best['maxnreg']} {best['int2_us']} us")
        del cache
        torch.cuda.empty_cache()
    write_sweep(args.out, rows)


if __name__ == "__main__":
    main()
