#!/usr/bin/env python3
"""Whether where the KV cache lives changes decode time (GPU). Session 18's calls 7 and 8 found the
same int2 pages decoded 1.2-1.8x slower inside a larger tensor -- as the engine allocates its whole
KV cache -- than in their own allocation; those copies were token-major (a .view() of the buffer),
not heads first as the originals (see `placed`), so the layout, not the place, was measured. This times
this tree's int2 decode on the same pages (a copy) placed:
  own           their own allocation;
  in_<N>GiB     at the start of an N GiB tensor (N = --sizes), and at its middle (in_<N>GiB_mid);
and, inside the largest tensor, with each sequence's pages in order (sorted table: consecutive
pages, contiguous memory per sequence) instead of shuffled. bf16 SDPA (flash) on contiguous K/V
[B, Hkv, S, D] is timed in its own allocation and inside the largest tensor. Each placement is timed
twice, in two passes, so the first pass's warm-up shows. CUDA-graph replays, L2 flushed before each
replay (decode_attention.Timer).

  python3 benchmarks/cache_placement.py --out $OUT/cache_placement.json
"""
import argparse
import json
import math
import sys

import torch

sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])
from benchmarks.decode_attention import Timer, log, random_int2_cache  # noqa: E402
from aphrodite_int2kv.int2.format import SlotLayout  # noqa: E402
from aphrodite_int2kv.kernels.decode import decode_launch_config, int2_decode  # noqa: E402


def sdpa_flash_us(timer, q, k, v, scale):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    B, Hq, D = q.shape
    Hkv = k.shape[1]
    qf = q.view(B, Hkv, Hq // Hkv, D)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        fn = lambda: torch.nn.functional.scaled_dot_product_attention(qf, k, v, scale=scale)  # noqa: E731
        return timer.median_us(fn, iters=20)


def placed(buf, offset, pages, like=None):
    """A copy of `pages` at byte `offset` of the uint8 buffer, laid out as `like` (default: pages)
    is -- heads first within a page (random_int2_cache). A plain .view() of the buffer would be
    token-major: session 18's call 7 and 8 copies were, and read 1.2-1.8x slower (not the place)."""
    like = pages if like is None else like
    out = buf.as_strided(like.shape, like.stride(), offset)
    out.copy_(pages)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="32/4/128/131072/32,32/4/128/32768/8", help="Hq/Hkv/D/S/B,...")
    ap.add_argument("--sizes", default="2,8,32,64", help="enclosing tensor sizes, GiB")
    ap.add_argument("--out", default="cache_placement.json")
    args = ap.parse_args()
    timer = Timer(graph=True)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    sizes = [int(x) for x in args.sizes.split(",")]
    rows = []
    for shape in args.shapes.split(","):
        Hq, Hkv, D, S, B = map(int, shape.split("/"))
        L = SlotLayout(D, 64)
        per_seq = math.ceil(S / 128)
        blocks = B * per_seq
        pages = random_int2_cache(L, blocks, 128, Hkv)
        nbytes = pages.numel()
        shuffled = torch.randperm(blocks, device="cuda").int().view(B, -1)
        in_order = torch.arange(blocks, device="cuda", dtype=torch.int32).view(B, -1)
        q = torch.randn(B, Hq, D, device="cuda", dtype=torch.bfloat16)
        seq = torch.full((B,), S, dtype=torch.int32, device="cuda")
        cfg = decode_launch_config(B, Hkv, Hq // Hkv, D, sms)
        out = torch.empty_like(q)
        want = int2_decode(q, pages, shuffled, seq, L, D ** -0.5, cfg.num_splits, **cfg.kwargs()).float()

        def time_at(name, where, table, passes):
            fn = lambda: int2_decode(q, where, table, seq, L, D ** -0.5, cfg.num_splits, out=out, **cfg.kwargs())  # noqa: E731
            fn()
            assert torch.equal(out.float(), want) if table is shuffled else (out.float() - want).abs().max() < 1e-2
            passes.setdefault(name, []).append(timer.median_us(fn))

        passes = {}
        for _ in range(2):
            time_at("own", pages, shuffled, passes)
            for gib in sizes:
                if gib << 30 < 2 * nbytes:
                    continue
                big = torch.empty(gib << 30, dtype=torch.uint8, device="cuda")
                for tag, off in (("", 0), ("_mid", ((gib << 30) // 2) & ~((2 << 20) - 1))):
                    inside = placed(big, off, pages)
                    time_at(f"in_{gib}GiB{tag}", inside, shuffled, passes)
                if gib == max(sizes):
                    # the same pages, each sequence's in order: a sorted table on a copy laid out so
                    inside = placed(big, 0, pages[shuffled.view(-1).long()], like=pages)
                    time_at(f"in_{gib}GiB_sorted", inside, in_order, passes)
                del big, inside
                torch.cuda.empty_cache()
        k = torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        bf16 = {"own": [sdpa_flash_us(timer, q, k, v, D ** -0.5)]}
        kv_bytes = 2 * k.numel() * 2
        gib = max(sizes)
        if gib << 30 >= 2 * kv_bytes:
            big = torch.empty(gib << 30, dtype=torch.uint8, device="cuda")
            off = ((gib << 30) // 2) & ~((2 << 20) - 1)
            k2 = big[off:off + kv_bytes // 2].view(torch.bfloat16).view(k.shape)
            v2 = big[off + kv_bytes // 2:off + kv_bytes].view(torch.bfloat16).view(v.shape)
            k2.copy_(k)
            v2.copy_(v)
            bf16[f"in_{gib}GiB_mid"] = [sdpa_flash_us(timer, q, k2, v2, D ** -0.5)]
            del big, k2, v2
        del k, v, pages
        torch.cuda.empty_cache()
        for name, us in passes.items():
            rows.append(dict(shape=shape, kernel="int2", placement=name, us_passes=[round(u, 2) for u in us]))
            log(f"{shape} int2 {name:>16}: " + "  ".join(f"{u:7.1f}" for u in us) + " us")
        for name, us in bf16.items():
            rows.append(dict(shape=shape, kernel="bf16 sdpa-flash", placement=name, us_passes=[round(u, 2) for u in us]))
            log(f"{shape} bf16 {name:>16}: " + "  ".join(f"{u:7.1f}" for u in us) + " us")
    with open(args.out, "w") as f:
        json.dump({"command": " ".join(sys.argv), "gpu": torch.cuda.get_device_name(0), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
