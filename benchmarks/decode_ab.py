#!/usr/bin/env python3
"""A/B of the int2 split-KV decode against an earlier revision of the kernels, in one process (GPU).

The baseline is a copy of an earlier `aphrodite_int2kv` package under another name, made by
  git archive REV aphrodite_int2kv | tar -x -C /tmp/ab && mv /tmp/ab/aphrodite_int2kv /tmp/ab/int2kv_base
  sed -i 's/aphrodite_int2kv/int2kv_base/g' $(grep -rl aphrodite_int2kv /tmp/ab/int2kv_base)
and put on sys.path with --baseline-path. Each side runs with its own engine launch config
(decode_launch_config) on the same caches and queries; the new side also with the split counts
of --per-sm (programs per multiprocessor). Every variant is checked against the torch reference
on short sequences first, and the two sides' full-length outputs against each other.
CUDA-graph replays, L2 flushed before each call, median of --iters (decode_attention.Timer); every
side timed twice, the second pass in reverse order, and the two medians averaged (us_passes).

  python3 benchmarks/decode_ab.py --baseline-path /tmp/ab --out $OUT/decode_ab.json
"""
import argparse
import importlib
import math
import statistics
import sys

import torch

sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])
from benchmarks.decode_attention import (Timer, log, precompile, ragged_lengths, random_int2_cache,  # noqa: E402
                                         window_pages, write_sweep)
from aphrodite_int2kv.int2 import reference as R  # noqa: E402
from aphrodite_int2kv.int2.format import SlotLayout, pages_heads_first, rotate_odd_slots  # noqa: E402
from aphrodite_int2kv.kernels import decode as new  # noqa: E402


def renamed_decoders(path: str, names) -> dict:
    """{name: name.kernels.decode} of the renamed packages `names` under `path` (made as above)."""
    sys.path.insert(0, path)
    return {m: importlib.import_module(f"{m}.kernels.decode") for m in names if m}


def paged_batch(layout, lens, block_size, num_kv_heads, heads_first=True):
    """random_int2_cache pages for sequences of lengths `lens`, each on its own shuffled pages:
    (cache, block table [B, max pages] int32, seq_lens [B] int32)."""
    need = [math.ceil(n / block_size) for n in lens]
    cache = random_int2_cache(layout, sum(need), block_size, num_kv_heads, heads_first=heads_first)
    pages = torch.randperm(sum(need), device="cuda").int()
    table = torch.zeros(len(lens), max(need), dtype=torch.int32, device="cuda")
    for b, k in enumerate(need):
        table[b, :k] = pages[sum(need[:b]):sum(need[:b]) + k]
    return cache, table, torch.tensor(lens, dtype=torch.int32, device="cuda")


def time_abba(timer, calls: dict, iters: int) -> dict:
    """{name: [median us, median us]} of each call, timed in two passes, the second in reverse
    order: the side timed first after the cache is built runs slower (measured: 461 vs
    422 us, the same kernel), which favoured every side after the first; report the mean of both."""
    timed = {}
    for name in list(calls) + list(calls)[::-1]:
        timed.setdefault(name, []).append(timer.median_us(calls[name], iters=iters))
    return timed


def side_specs(args, mods: dict, Hq: int, Hkv: int, D: int, B: int, max_len: int, sms: int) -> list:
    """The launches timed on one shape: (name, module key in mods, num_splits, int2_decode kwargs),
    "base" first, then "new", the alt modules and the variants the flags ask for."""
    base, new = mods["base"], mods["new"]
    bcfg = base.decode_launch_config(B, Hkv, Hq // Hkv, D, sms)
    ncfg = new.decode_launch_config(B, Hkv, Hq // Hkv, D, sms)
    sides = [("base", "base", bcfg.num_splits, bcfg.kwargs()), ("new", "new", ncfg.num_splits, ncfg.kwargs())]
    for m in [m for m in args.alt_modules.split(",") if m]:
        acfg = mods[m].decode_launch_config(B, Hkv, Hq // Hkv, D, sms)
        sides.append((m, m, acfg.num_splits, acfg.kwargs()))
    tiles = [tuple(map(int, v.split("/"))) for v in args.variants.split(",") if v]
    for spec in [x for x in args.per_sm.split(",") if x]:
        per_sm, _, cap = spec.partition(":")
        per_sm = int(per_sm)
        for bn, nw, ns in tiles or [(ncfg.block_n, ncfg.num_warps, ncfg.num_stages)]:
            splits = max(1, min(256, per_sm * sms // (B * Hkv * math.ceil(Hq // Hkv / ncfg.block_h))))
            kw = dict(ncfg.kwargs(), block_n=bn, num_warps=nw, num_stages=ns)
            if cap:
                kw["maxnreg"] = int(cap)
            sides.append((f"new/{spec}/{bn}/{nw}/{ns}", "new", splits, kw))
    for v in [v for v in args.short.split(",") if v]:
        sn, su = map(int, v.split("/"))
        sides.append((f"new/short{sn}/{su}", "new", ncfg.num_splits, dict(ncfg.kwargs(), short_n=sn, short_units=su)))
    for v in [v for v in args.tiles.split(",") if v]:
        side, _, v = v.rpartition(":")
        side = side or "new"
        mod, cfg = mods[side], (bcfg if side == "base" else ncfg)
        bh, nw, tm, rows, bn, cap, per_sm = (list(map(int, v.split("/"))) + [0] * 4)[:7]
        tiles_per_group = math.ceil(Hq // Hkv / bh)
        per_sm = per_sm or mod.programs_per_sm(D, bh, cfg.fold)
        splits = max(1, min(256, per_sm * sms // (B * Hkv * tiles_per_group)))   # as the engine plans: no context
        kw = dict(cfg.kwargs(), block_h=bh, num_warps=nw, tile_major=bool(tm), rows_on_m=bool(rows),
                  maxnreg=cap or mod.register_cap(D, bh, cfg.fold))
        if bn:      # another tile length: short shares only where they are shorter than it
            kw.update(block_n=bn, **({} if kw.get("short_n", 0) < bn else dict(short_n=0, short_units=0)))
        name = f"{side}/h{bh}/w{nw}/{'tm' if tm else 'pm'}{'/rows' if rows else ''}" + \
            (f"/n{bn}" if bn else "") + (f"/r{cap}" if cap else "") + (f"/{per_sm}sm" if v.count("/") >= 6 else "")
        sides.append((name, side, splits, kw))
    for v in [v for v in args.merge.split(",") if v]:
        ms, mw = map(int, v.split("/"))
        sides.append((f"new/merge{ms}/{mw}", "new", ncfg.num_splits, dict(ncfg.kwargs(), merge_split=ms, merge_warps=mw)))
    for dt in [d for d in args.partial_dtypes.split(",") if d]:
        sides += [(f"{name}/{dt}", m, splits, dict(kw, partial_dtype=getattr(torch, dt)))
                  for name, m, splits, kw in list(sides) if m == "new" and "/float" not in name and "/bfloat" not in name]
    return sides


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-path", required=True, help="directory holding the renamed baseline package")
    ap.add_argument("--baseline-module", default="int2kv_base")
    ap.add_argument("--alt-modules", default="",
                    help="more renamed packages under --baseline-path to time with their own launch config, a,b,...")
    ap.add_argument("--configs", default="32/4/128,16/2/256", help="Hq/Hkv/D,...")
    ap.add_argument("--contexts", default="32768,131072")
    ap.add_argument("--batches", default="8,32,64")
    ap.add_argument("--per-sm", default="",
                    help="extra split counts for the new side: programs per SM, each N or N:R (R: a register cap)")
    ap.add_argument("--variants", default="", help="extra new-side tiles: block_n/num_warps/num_stages,...")
    ap.add_argument("--short", default="",
                    help="extra new-side launches with other short shares: short_n/short_units,... (0/0: one "
                         "loop of block_n; 32/0: both loops compiled, never short)")
    ap.add_argument("--merge", default="",
                    help="extra new-side launches with another merge: merge_split/merge_warps,... (int2_decode)")
    ap.add_argument("--tiles", default="",
                    help="extra launches with another head tile: [base:]block_h/num_warps/tile_major[/rows_on_m"
                         "[/block_n/maxnreg/per_sm]],... (base: on the baseline package; tile_major 1: the head "
                         "tiles of a KV head side by side in the grid; rows_on_m 1: the folded tile with the query "
                         "rows on the MMA's M, folded.int2_tile_rows; block_n 0 / maxnreg 0 / per_sm 0: as the "
                         "launch config plans them; splits for per_sm programs per multiprocessor, else for "
                         "programs_per_sm of that tile)")
    ap.add_argument("--partial-dtypes", default="",
                    help="each new-side launch also with its partial results in these dtypes: bfloat16,float16")
    ap.add_argument("--precompile", type=int, default=0,
                    help="compile every side's kernels first in this many processes (Triton's on-disk cache is "
                         "shared), so that the timed process only loads them")
    ap.add_argument("--head-major", action="store_true",
                    help="also time the new side on the same pages read heads first (pages_heads_first)")
    ap.add_argument("--heads-first", action="store_true",
                    help="both sides on pages read heads first (the engine's layout), not token-major")
    ap.add_argument("--ragged", action="store_true",
                    help="sequence lengths spread evenly from S/8 to 15S/8 (mean S, shuffled) instead of all S")
    ap.add_argument("--window", type=int, default=0,
                    help="a full-precision recent window of R tokens on every side (the engine's default 128)")
    ap.add_argument("--q-scale", type=float, default=1.0,
                    help="queries times this: sharper scores, so the folded tile's lazy rescale is taken more often")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out", default="decode_ab.json")
    args = ap.parse_args()
    base = renamed_decoders(args.baseline_path, [args.baseline_module])[args.baseline_module]
    base_fmt = importlib.import_module(f"{args.baseline_module}.int2.format")
    alts = renamed_decoders(args.baseline_path, args.alt_modules.split(","))
    mods = {"base": base, "new": new, **alts}
    timer = Timer(graph=True)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    G, BS = 64, 128
    if args.precompile:
        names = {"base": args.baseline_module, "new": "aphrodite_int2kv", **{m: m for m in alts}}
        jobs = {}
        for cfg in args.configs.split(","):
            Hq, Hkv, D = map(int, cfg.split("/"))
            for S in map(int, args.contexts.split(",")):
                for B in map(int, args.batches.split(",")):
                    lens = ragged_lengths(S, B) if args.ragged else [S] * B
                    for name, m, splits, kw in side_specs(args, mods, Hq, Hkv, D, B, max(lens), sms):
                        job = (args.baseline_path, names[m], Hq, Hkv, D, G, BS, B, splits, kw)
                        jobs.setdefault(repr(job), job)
        precompile(list(jobs.values()), args.precompile)
    rows = []
    for cfg in args.configs.split(","):
        Hq, Hkv, D = map(int, cfg.split("/"))
        L = SlotLayout(D, G)
        for S in map(int, args.contexts.split(",")):
            for B in map(int, args.batches.split(",")):
                lens = ragged_lengths(S, B) if args.ragged else [S] * B
                cache, table, seq = paged_batch(L, lens, BS, Hkv, heads_first=args.heads_first)
                blocks = cache.shape[0]
                short = torch.full((B,), 3000, dtype=torch.int32, device="cuda")
                q = (torch.randn(B, Hq, D, device="cuda") * args.q_scale).to(torch.bfloat16)
                ref = R.decode_reference(q[:2].float(), cache, table[:2], short[:2], L, D ** -0.5)
                extra = {}
                if args.window:   # window pages as decode_attention.py's --window builds them (blocks of 48)
                    extra["window"] = window_pages(B, max(lens), Hkv, D, args.window)
                sides = [(name, mods[m].int2_decode, splits, kw)
                         for name, m, splits, kw in side_specs(args, mods, Hq, Hkv, D, B, max(lens), sms)]
                if args.head_major:   # the same pages, each page's slots heads first
                    hm = pages_heads_first(cache)
                    ref_hm = R.decode_reference(q[:2].float(), hm, table[:2], short[:2], L, D ** -0.5)
                    sides += [("hm/" + name, fn, splits, kw) for name, fn, splits, kw in sides[1:]]
                outs = {}
                line = []
                base_pages = cache
                if not hasattr(base_fmt.SlotLayout, "odd_shift"):   # a baseline before odd slots: logical bytes
                    offsets = torch.arange(BS, device="cuda")[None, :, None].expand(blocks, BS, Hkv)
                    base_pages = cache.clone()
                    base_pages.copy_(rotate_odd_slots(cache, offsets, L, stored=False))
                calls, errs = {}, {}
                for name, fn, splits, kw in sides:
                    pages, want = (hm, ref_hm) if name.startswith("hm/") else (cache, ref)
                    if name == "base":
                        pages = base_pages
                    try:
                        got = fn(q, pages, table, short, L, D ** -0.5, splits, **kw)[:2].float()
                        if extra:   # the reference above has no window: checked without it, timed with it
                            kw = dict(kw, **extra)
                        errs[name] = (got - want).abs().max().item()
                        if not errs[name] < 2e-2:
                            raise AssertionError(f"max error {errs[name]:.3g} vs reference")
                        calls[name] = lambda fn=fn, pages=pages, splits=splits, kw=kw: fn(  # noqa: E731
                            q, pages, table, seq, L, D ** -0.5, splits, **kw)
                        outs[name] = calls[name]().float()
                    except Exception as exc:  # noqa: BLE001 - a sweep: report and go on
                        log(f"    {name}: {str(exc).splitlines()[0][:160]}")
                        errs[name] = float("nan")
                timed = time_abba(timer, calls, args.iters)     # calls holds the sides in their order
                for name, fn, splits, kw in sides:
                    us = statistics.mean(timed[name]) if name in timed else float("nan")
                    err = errs.get(name, float("nan"))
                    diff = (outs[name] - outs["base"]).abs().max().item() \
                        if name in outs and "base" in outs and not name.startswith("hm/") else None
                    rows.append(dict(num_q_heads=Hq, num_kv_heads=Hkv, head_dim=D, context_len=S, batch=B, ragged=args.ragged,
                                     group_size=G, block_size=BS, side=name, num_splits=splits,
                                     launch={k: str(v) if isinstance(v, torch.dtype) else v for k, v in kw.items() if k != "window"}, window=args.window, int2_us=round(us, 2),
                                     us_passes=[round(u, 2) for u in timed.get(name, [])], ref_err=err,
                                     max_diff_vs_base=diff))
                    line.append(f"{name}:{splits}={us:.1f}")
                b_us = rows[-len(sides)]["int2_us"]
                best = min(rows[-len(sides) + 1:], key=lambda r: r["int2_us"] if r["int2_us"] == r["int2_us"] else 1e9)
                log(f"Hq{Hq}/kv{Hkv}/D{D} S={S} B={B}: " + " ".join(line) +
                    f" | new/base {rows[-len(sides) + 1]['int2_us'] / b_us:.3f}, best {best['side']} {best['int2_us'] / b_us:.3f}")
                del cache
                torch.cuda.empty_cache()
    write_sweep(args.out, rows)


if __name__ == "__main__":
    main()
