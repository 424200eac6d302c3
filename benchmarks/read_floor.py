#!/usr/bin/env python3
"""How fast one kernel launch can read N bytes at all (GPU): the floor any decode of that many
cache bytes stands on.

A diagnostic for issue #3's "60 % of copy" goal, whose copy figure is a 4 GiB device copy
(decode_attention.py copy_bandwidth). At 32K batch 8 the int2 decode reads 84 MB, read in ~20 us
at that rate: a launch's fixed costs (start, ramp-up, the last programs' tail) weigh on such a
read as on the decode. This times, in one process, with CUDA-graph replays and L2 flushed as
decode_attention.py times the decode:

- `read`: a plain streaming read of the same bytes, contiguous, by a Triton kernel of this file
  (each program sums its share as int32 vectors and writes one word), the best over a sweep of
  programs per multiprocessor, warps, bytes per step and pipeline stages (the sweep includes the
  int2 split launch's own shape at head_dim 128: 12 one-warp programs per multiprocessor, 3
  stages, steps of 2 and 4 KB about its 32-token tile's 2.5 KB; every configuration's time is kept);
- `copy`: torch's device copy of the same bytes (read + written, as the copy figure counts);
- `int2`: the shipped int2 decode (decode_launch_config) of the shapes that read that many bytes.

  python3 benchmarks/read_floor.py --contexts 32768 --batches 8 --out $OUT/read_floor.json

Each row: nbytes, the best read's us and configuration, its % of the copy figure, the copy's us,
and the int2 decode's us and % for each head configuration given.
"""
import argparse
import itertools
import statistics
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])
from benchmarks.decode_ab import paged_batch  # noqa: E402
from benchmarks.decode_attention import Timer, copy_bandwidth, gpu_state, log, write_sweep  # noqa: E402
from aphrodite_int2kv.int2.format import SlotLayout  # noqa: E402
from aphrodite_int2kv.kernels import decode  # noqa: E402


@triton.jit
def _read_kernel(src_ptr, out_ptr, num_words, words_per_program, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    """Program p sums int32 words [p * words_per_program, (p + 1) * words_per_program) of src's
    num_words, BLOCK at a time (the last step masked), and writes the sum to out[p]."""
    program = tl.program_id(0)
    first = program.to(tl.int64) * words_per_program
    last = tl.minimum(first + words_per_program, num_words)
    offsets = tl.arange(0, BLOCK)
    total = tl.zeros([BLOCK], tl.int32)
    for w0 in tl.range(0, words_per_program, BLOCK, num_stages=STAGES):
        at = first + w0 + offsets
        total += tl.load(src_ptr + at, mask=at < last, other=0)
    tl.store(out_ptr + program, tl.sum(total, axis=0))


def read_once(src, out, programs, block, warps, stages):
    """All of src's words, dealt to `programs` programs in contiguous shares (cdiv)."""
    words = src.numel()
    _read_kernel[(programs,)](src, out, words, -(-words // programs), BLOCK=block, STAGES=stages, num_warps=warps)


def best_read(timer, nbytes, sms, args):
    """(us, config, every config's us) of the fastest read of exactly nbytes over the sweep."""
    assert nbytes % 4 == 0
    best = (float("inf"), None)
    swept = []
    out = torch.empty(sms * max(args.per_sm), dtype=torch.int32, device="cuda")
    src = torch.ones(nbytes // 4, dtype=torch.int32, device="cuda")
    for per_sm, warps, block_bytes, stages in itertools.product(args.per_sm, args.warps, args.step_bytes,
                                                                args.stages):
        programs = per_sm * sms
        us = timer.median_us(lambda: read_once(src, out, programs, block_bytes // 4, warps, stages),
                             iters=args.iters)
        # the kernel read every word once (torch's sum of its per-program sums)
        assert int(out[:programs].sum()) == src.numel(), "read kernel: wrong sum"
        config = dict(per_sm=per_sm, warps=warps, step_bytes=block_bytes, stages=stages)
        swept.append(dict(config, us=round(us, 2)))
        if us < best[0]:
            best = (us, config)
    del src
    return best[0], best[1], swept


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="32/4/128,16/2/256", help="Hq/Hkv/D,... (int2 decodes timed beside)")
    ap.add_argument("--contexts", default="32768")
    ap.add_argument("--batches", default="8")
    ap.add_argument("--per-sm", default="1,2,4,8,12,16,32", help="read programs per multiprocessor (swept)")
    ap.add_argument("--warps", default="1,4,8,16")
    ap.add_argument("--step-bytes", default="2048,4096,8192,16384,32768", help="bytes a program loads per step")
    ap.add_argument("--stages", default="1,2,3")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out", default="read_floor.json")
    args = ap.parse_args()
    for name in ("per_sm", "warps", "step_bytes", "stages"):
        setattr(args, name, [int(x) for x in getattr(args, name).split(",")])
    timer = Timer(graph=True)
    copy_gbps = copy_bandwidth(timer)
    log(f"copy bandwidth {copy_gbps:.0f} GB/s (4 GiB, read + written)")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    G, BS = 64, 128
    rows = []
    reads = {}      # nbytes -> best_read's answer (configurations of equal bytes share one sweep)
    for S in map(int, args.contexts.split(",")):
        for B in map(int, args.batches.split(",")):
            for cfg in args.configs.split(","):
                Hq, Hkv, D = map(int, cfg.split("/"))
                L = SlotLayout(D, G)
                nbytes = B * S * Hkv * L.slot_bytes
                q = torch.randn(B, Hq, D, device="cuda").to(torch.bfloat16)
                launch = decode.decode_launch_config(B, Hkv, Hq // Hkv, D, sms)

                def time_int2():
                    """The shipped decode on fresh pages (freed after: the sweep needs the memory)."""
                    cache, table, seq = paged_batch(L, [S] * B, BS, Hkv, heads_first=True)
                    us = timer.median_us(lambda: decode.int2_decode(q, cache, table, seq, L, D ** -0.5,
                                                                     launch.num_splits, **launch.kwargs()),
                                         iters=args.iters)
                    del cache
                    torch.cuda.empty_cache()
                    return us

                int2 = [time_int2()]
                if nbytes not in reads:
                    reads[nbytes] = best_read(timer, nbytes, sms, args)
                read_us, read_cfg, swept = reads[nbytes]
                a = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
                b = torch.empty_like(a)
                copy_us = Timer(flush_bytes=256 << 20).median_us(lambda: b.copy_(a), iters=args.iters)  # eager
                del a, b
                int2.append(time_int2())     # again after the sweep: the two timings bracket the read's
                int2_us = statistics.mean(int2)
                frac = {k: nbytes / us / 1e3 / copy_gbps for k, us in
                        (("read", read_us), ("int2", int2_us), ("copy_same", copy_us / 2))}
                rows.append(dict(context_len=S, batch=B, num_q_heads=Hq, num_kv_heads=Hkv, head_dim=D, group_size=G,
                                 nbytes=nbytes, copy_GBps=round(copy_gbps, 1),
                                 read_us=round(read_us, 2), read_config=read_cfg, read_frac_copy=round(frac["read"], 3), read_swept=swept,
                                 copy_same_us=round(copy_us, 2), copy_same_frac_copy=round(frac["copy_same"], 3),
                                 int2_us=round(int2_us, 2), int2_us_passes=[round(x, 2) for x in int2],
                                 int2_frac_copy=round(frac["int2"], 3), copy_time_us=round(nbytes / copy_gbps / 1e3, 2),
                                 gpu_state=gpu_state()))
                shaped = [r for r in swept if (r["per_sm"], r["warps"], r["stages"]) == (12, 1, 3)]
                if shaped:
                    log("  read shaped as the split launch (12 one-warp programs per SM, 3 stages): " +
                        ", ".join(f"{r['step_bytes']} B steps {r['us']:.1f} us" for r in shaped))
                log(f"S={S} B={B} Hq{Hq}/kv{Hkv}/D{D} {nbytes / 1e6:.0f} MB: read {read_us:.1f} us "
                    f"({frac['read']:.0%} of copy; {read_cfg}), int2 {int2_us:.1f} us ({frac['int2']:.0%}), "
                    f"copy of the same bytes {copy_us:.1f} us (read+write: {frac['copy_same']:.0%} per byte moved)")
    write_sweep(args.out, rows)


if __name__ == "__main__":
    main()
