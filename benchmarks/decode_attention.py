#!/usr/bin/env python3
"""int2 paged decode vs the fastest bf16 decode on the same shapes, in one process (GPU).

bf16 contenders (same Hq/Hkv/D/context/batch, one query token per sequence):
  sdpa-<backend>  torch SDPA on contiguous K/V [B, Hkv, S, D], Q folded to [B, Hkv, G, D]
                  (flash / cuDNN / efficient, each forced; K/V read once per KV head)
  aphrodite-triton  aphrodite 0.21.0's grouped split-KV Triton decode on a paged bf16 cache
                    (if aphrodite is importable; ratio 8 is not affected by its head-tiling bug)
int2: aphrodite_int2kv.kernels.decode.int2_decode on a paged int2 cache (block size 16), with the
engine's tile for uniform levels (folded) unless --tile per-code.

Timing: CUDA events, L2 flushed (256 MiB memset) before every timed call, median of --iters;
with --graph each contender is captured in a CUDA graph and replayed (as the engine runs decode),
so host launch overhead is left out for int2 and bf16 alike.
Rows (JSON list) go to --out: context_len, batch, num_q_heads, num_kv_heads, head_dim,
group_size, int2_us, bf16_us, bf16_kernel, speedup, int2_bytes_read, int2_GBps, copy_GBps, ...
Usage: python benchmarks/decode_attention.py --out $OUT/decode_attention_h200.json
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import math
import platform
import statistics
import subprocess
import sys
import time
import traceback

import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])
from aphrodite_int2kv.int2.format import SlotLayout, pages_heads_first, rotate_odd_slots  # noqa: E402
from aphrodite_int2kv.kernels.decode import decode_launch_config, int2_decode, partial_slots, pick_num_splits  # noqa: E402


RATIOS = (1, 2, 4, 8, 12, 16, 24, 32)
# Named shape sets for --configs (Hq/Hkv/D per shape): the ratio-8 table; query-to-KV-head ratios
# 1-32 at 1, 2, 4 and 8 KV heads; and the per-GPU heads of common models under tensor parallelism
# (heads / TP each), where few KV heads meet many query heads.
CONFIG_SETS = {
    "ratio8": "32/4/128,16/2/256",
    "ratios-d128": ",".join(f"{r * h}/{h}/128" for h in (1, 2, 4, 8) for r in RATIOS),
    "ratios-d256": ",".join(f"{r * h}/{h}/256" for h in (1, 2, 4, 8) for r in RATIOS),
    "tp": ",".join((
        "16/4/128,8/2/128,4/1/128",       # Llama-3.1-8B (32 q / 8 kv) at TP 2, 4, 8
        "32/4/128,16/2/128,8/1/128",      # Llama-3.1-70B, Qwen2.5-72B (64 / 8) at TP 2, 4, 8
        "14/2/128,7/1/128",               # Qwen2.5-7B (28 / 4) at TP 2, 4
        "12/1/128,16/1/128",              # Mistral-Large-2 (96 / 8), Llama-3.1-405B (128 / 8) at TP 8
        "48/1/128",                       # StarCoder-style multi-query attention (48 / 1)
        "12/2/256,6/1/256,8/1/256")),     # Qwen3.5-27B (24 / 4, head_dim 256) at TP 2, 4; Qwen3-Next (16 / 2) at TP 2
}


def expand_configs(spec: str) -> list:
    """--configs: Hq/Hkv/D shapes and named sets (CONFIG_SETS), comma-separated, in order, each once."""
    out = []
    for item in spec.split(","):
        for cfg in CONFIG_SETS.get(item, item).split(","):
            Hq, Hkv, D = map(int, cfg.split("/"))
            if Hq % Hkv:
                raise SystemExit(f"--configs {cfg}: {Hq} query heads are not a multiple of {Hkv} KV heads")
            if (Hq, Hkv, D) not in out:
                out.append((Hq, Hkv, D))
    return out


def ragged_lengths(S: int, B: int) -> list:
    """B sequence lengths spread evenly from S/8 to 15S/8 (mean S), shuffled with seed B: the
    mixed batch of decode_ab.py --ragged and e2e_throughput.py --mixed."""
    if B == 1:
        return [S]
    g = torch.Generator().manual_seed(B)
    return [round(S * (1 + 7 * (2 * i / (B - 1) - 1) / 8)) for i in torch.randperm(B, generator=g).tolist()]


def window_pages(batch, max_len, num_kv_heads, head_dim, R, wbs=48, device="cuda"):
    """The int2_decode `window` of a batch: random bf16 K/V pages [blocks, wbs, Hkv, D] for the
    last R positions of sequences of length max_len (their logical blocks and one more; older ones
    point at page 0, never read, as in a sliding-window cache), the block table [batch, logical
    blocks] int32, and R."""
    nlog = math.ceil(max_len / wbs)
    need = min(nlog, math.ceil(R / wbs) + 1)
    k_win = torch.randn(batch * need + 1, wbs, num_kv_heads, head_dim, device=device, dtype=torch.bfloat16)
    table = torch.zeros(batch, nlog, dtype=torch.int32, device=device)
    table[:, nlog - need:] = (1 + torch.arange(batch, device=device)[:, None] * need
                              + torch.arange(need, device=device)[None, :]).int()
    return (k_win, torch.randn_like(k_win), table, R)


def tiles_row(timer, args, B, S, Hq, Hkv, D, bf16, best, copy_gbps, env) -> dict:
    """--format tiles: the channel-tile format's split decode (kernels/tile_split_decode.py) as the
    engine launches it (pages of 128 tokens, splits from the batch size and the GPU, the 128-token
    bf16 window and the token's own K/V) on random records, timed like the per-token int2 rows."""
    from aphrodite_int2kv.engine.options import TILE_SINKS
    from aphrodite_int2kv.int2.tile_format import TileLayout, TilePages
    from aphrodite_int2kv.kernels.limits import device_limits
    from aphrodite_int2kv.kernels.tile_split_decode import tile_decode_splits, tile_split_decode

    L, BS, R = TileLayout(D, 64, k_bits=args.k_bits), 128, 128
    blocks = B * math.ceil(S / BS)
    raw = torch.randint(0, 256, (blocks, Hkv, BS, L.token_bytes), dtype=torch.uint8, device="cuda")
    pages = TilePages.of_cache(raw.transpose(1, 2), L)
    f16 = pages.as_f16().view(blocks, Hkv, -1)          # every fp16 field a sane value (norms, peaks)
    f16.uniform_(0.5, 1.5)
    pages.flat.view(blocks, Hkv, -1)[..., :L.k_norm] = torch.randint(0, 256, (1,), dtype=torch.uint8, device="cuda")
    table = torch.randperm(blocks, device="cuda").int().view(B, -1)
    seq = torch.full((B,), S, dtype=torch.int32, device="cuda")
    q = torch.randn(B, Hq, D, device="cuda", dtype=torch.bfloat16)
    kv = torch.randn(B, Hkv, D, device="cuda", dtype=torch.bfloat16)
    win = window_pages(B, S, Hkv, D, R, 16)
    planned = tile_decode_splits(B, Hkv * math.ceil(Hq // Hkv / 16), device_limits(q.device).num_sms)
    out = torch.empty_like(q)
    rows = []
    for splits in [int(x) or planned for x in args.tile_splits.split(",")]:
        fn = lambda: tile_split_decode(q, kv, kv, pages, table, seq, D ** -0.5, win, out=out,  # noqa: E731
                                       num_splits=splits, sinks=TILE_SINKS)
        try:
            us = timer.median_us(fn, iters=args.iters, name=f"tiles/{splits}")
        except Exception:
            traceback.print_exc()
            us = float("nan")
        rows.append(_tiles_result(us, splits, splits == planned, B, S, Hq, Hkv, D, L, BS, R, bf16, best, copy_gbps,
                                  env))
    return rows


def _tiles_result(us, splits, planned, B, S, Hq, Hkv, D, L, BS, R, bf16, best, copy_gbps, env) -> dict:
    nbytes = B * S * Hkv * L.token_bytes
    row = dict(context_len=S, batch=B, num_q_heads=Hq, num_kv_heads=Hkv, head_dim=D, int2_format="tiles",
               k_bits=L.k_bits, tile=64, block_size=BS, window=R, num_splits=splits, planned_splits=planned,
               int2_us=round(us, 2),
               bf16_us=round(bf16[best], 2) if best else None, bf16_kernel=best,
               bf16_all_us={k: round(v, 2) for k, v in bf16.items()},
               speedup=round(bf16[best] / us, 3) if best else None, int2_bytes_read=nbytes,
               int2_GBps=round(nbytes / us / 1e3, 1), copy_GBps=round(copy_gbps, 1),
               frac_copy=round(nbytes / us / 1e3 / copy_gbps, 3), env=env)
    log(f"Hq{Hq}/kv{Hkv}/D{D} S={S:>6} B={B:>2} tiles/{splits:<2}{'*' if planned else ' '}: {us:8.1f} us "
        f"({row['int2_GBps']:6.0f} GB/s)  "
        f"bf16 {row['bf16_us']} us [{best}]  speedup {row['speedup']}")
    return row


def log(*a):
    print(*a, flush=True)


def write_sweep(path, rows):
    """A sweep's rows with the command line and the GPU (decode_tune.py, decode_ab.py)."""
    with open(path, "w") as f:
        json.dump({"command": " ".join(sys.argv), "gpu": torch.cuda.get_device_name(0), "rows": rows}, f, indent=1)


class Timer:
    """Median GPU time of fn. With `graph` (--graph), fn is captured once in a CUDA graph and the
    graph replayed, as the engine replays decode: the Python/Triton launch cost of the host (tens
    of microseconds per launch, more than a short kernel) then stays out of the figure, and a
    variant with one more launch is charged only its GPU time. Falls back to eager launches when
    fn cannot be captured (noted in the log)."""

    def __init__(self, flush_bytes=256 << 20, graph=False):
        self.flush = torch.empty(flush_bytes, dtype=torch.uint8, device="cuda")
        self.graph = graph
        self.eager = {}     # contender -> why it could not be captured (the shape's row keeps it)

    def _captured(self, fn):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        torch.cuda.synchronize()
        return g.replay

    def median_us(self, fn, iters=20, warmup=3, name="int2"):
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        if self.graph:
            try:
                fn = self._captured(fn)
            except Exception as exc:  # noqa: BLE001 - a timing method, not a result
                why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
                self.eager[name] = why
                log(f"    ({name}: CUDA graph capture failed: {why}; timing eager launches)")
                log("".join(traceback.format_exception(exc)[-6:]))
                torch.cuda.synchronize()
        times = []
        for _ in range(iters):
            self.flush.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) * 1000.0)
        return statistics.median(times)


def gpu_state() -> dict:
    """The GPU's SM clock (MHz), power draw (W) and temperature (C) now, from nvidia-smi: an
    issue-bound kernel timed right after the bf16 kernels of a large shape may run at a lower
    clock than one timed alone. {} where nvidia-smi is missing."""
    try:
        # nvidia-smi numbers the GPUs its own way (all of them, PCI order), torch within
        # CUDA_VISIBLE_DEVICES: ask for this process's GPU by its PCI bus id
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        bus_id = f"{p.pci_domain_id:08x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                              "--format=csv,noheader,nounits", "-i", bus_id],
                             capture_output=True, text=True, timeout=10).stdout.split(",")
        return dict(sm_mhz=float(out[0]), watts=float(out[1]), celsius=float(out[2]))
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return {}


def copy_bandwidth(timer, nbytes=4 << 30):
    a = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    # always eager: a captured device-to-device copy becomes a graph memcpy node run by the copy
    # engines (~2.8 TB/s on the H200 vs ~4.3 TB/s for the SM copy kernel)
    us = Timer(flush_bytes=1).median_us(lambda: b.copy_(a), iters=10)
    del a, b
    return 2 * nbytes / us / 1e3  # GB/s, bytes read + written


def random_int2_cache(layout, num_blocks, block_size, hkv, heads_first=True):
    """Random int2 pages [blocks, block_size, Hkv, slot] with sane scales and zeros, laid out heads
    first as the engine's pages are (int2/format.py pages_heads_first), or token-major."""
    cache = torch.randint(0, 256, (num_blocks, block_size, hkv, layout.slot_bytes),
                          dtype=torch.uint8, device="cuda")
    if heads_first:
        cache = pages_heads_first(cache)
    stored = cache
    cache = stored.clone()                # logical slots first, rotated as stored at the end
    meta = cache[..., layout.k_scale:layout.used_bytes].view(torch.float16)
    ng = layout.num_groups
    meta[..., 0 * ng:1 * ng].uniform_(0.05, 0.3)    # K scale
    meta[..., 1 * ng:2 * ng].uniform_(-0.5, -0.2)   # K zero
    meta[..., 2 * ng:3 * ng].uniform_(0.05, 0.3)    # V scale
    meta[..., 3 * ng:4 * ng].uniform_(-0.5, -0.2)   # V zero
    offsets = torch.arange(block_size, device="cuda")[None, :, None].expand(num_blocks, block_size, hkv)
    stored.copy_(rotate_odd_slots(cache, offsets, layout))   # odd page offsets rotated (docs/format.md)
    return stored


def bench_bf16_sdpa(timer, q, k, v, scale):
    """q [B, Hq, D]; k/v [B, Hkv, S, D] contiguous. Returns {kernel: us}."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    B, Hq, D = q.shape
    Hkv = k.shape[1]
    qf = q.view(B, Hkv, Hq // Hkv, D)
    out = {}
    for name, be in (("sdpa-flash", SDPBackend.FLASH_ATTENTION), ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION),
                     ("sdpa-efficient", SDPBackend.EFFICIENT_ATTENTION)):
        try:
            with sdpa_kernel([be]):
                fn = lambda: F.scaled_dot_product_attention(qf, k, v, scale=scale)  # noqa: E731
                fn()
                out[name] = timer.median_us(fn, name=name)
        except Exception as exc:  # a backend may refuse a shape
            log(f"    {name}: {str(exc).splitlines()[0][:100]}")
    return out


def bench_aphrodite_triton(timer, q, k, v, block_size, scale):
    try:
        from aphrodite.v1.attention.ops.triton_decode_attention import decode_attention_fwd
    except Exception as exc:
        log(f"    aphrodite-triton unavailable: {exc}")
        return {}
    B, Hq, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    if B * S * Hkv * D >= 2 ** 31:
        log("    aphrodite-triton skipped: its int32 cache offsets overflow at this size")
        return {}
    pages = S // block_size
    kp = k.permute(0, 2, 1, 3).reshape(B * pages, block_size, Hkv, D)   # paged, token-major
    vp = v.permute(0, 2, 1, 3).reshape(B * pages, block_size, Hkv, D)
    table = torch.arange(B * pages, dtype=torch.int32, device="cuda").view(B, pages)
    seq = torch.full((B,), S, dtype=torch.int32, device="cuda")
    splits = pick_num_splits(B, Hkv, S)
    o = torch.empty_like(q)
    lse = torch.empty(B, Hq, dtype=torch.float32, device="cuda")
    logits = torch.empty(B, Hq, splits, D + 1, dtype=torch.float32, device="cuda")
    fn = lambda: decode_attention_fwd(q, kp, vp, o, lse, table, seq, logits, splits, scale,  # noqa: E731
                                      page_size=block_size)
    try:
        fn()
        return {"aphrodite-triton": timer.median_us(fn, name="aphrodite-triton")}
    except Exception as exc:
        log(f"    aphrodite-triton: {str(exc).splitlines()[0][:120]}")
        return {}


def _compile_one(job):
    """One side's kernels run once on a small cache of the same layout (precompile's worker): the
    same constexprs and argument specializations as the timed launch, so it compiles the same
    variants."""
    path, module, Hq, Hkv, D, G, BS, B, splits, kw = job
    if path and path not in sys.path:
        sys.path.insert(0, path)
    dec = importlib.import_module(f"{module}.kernels.decode")
    fmt = importlib.import_module(f"{module}.int2.format")
    L = fmt.SlotLayout(D, G)
    cache = torch.randint(0, 256, (16 * B, BS, Hkv, L.slot_bytes), dtype=torch.uint8, device="cuda")
    table = torch.arange(16 * B, dtype=torch.int32, device="cuda").view(B, 16)      # 16 pages: stride 16
    seq = torch.full((B,), 16 * BS, dtype=torch.int32, device="cuda")
    q = torch.randn(B, Hq, D, device="cuda", dtype=torch.bfloat16)
    try:
        dec.int2_decode(q, cache, table, seq, L, D ** -0.5, splits, **kw)
        torch.cuda.synchronize()
        return None
    except Exception as exc:  # noqa: BLE001 - the timed run reports it again
        return f"{module} {Hq}/{Hkv}/{D} B={B} {kw}: {str(exc).splitlines()[0][:160]}"


def precompile(jobs: list, workers: int):
    """Compile the jobs' kernels in `workers` spawned processes (compiling, not timing, is what
    takes a sweep's time on a 16-core machine); Triton's on-disk cache carries them over."""
    import multiprocessing
    import time
    t0 = time.time()
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        errors = [e for e in pool.map(_compile_one, jobs, chunksize=1) if e]
    log(f"precompiled {len(jobs)} launches in {time.time() - t0:.0f} s with {workers} processes")
    for e in errors:
        log(f"    precompile: {e}")


def tune(timer, props, args):
    """Print int2 decode time for block_n x num_warps x num_stages x split count on a few shapes
    (choose defaults from it). Each shape is first checked against a torch reference."""
    from aphrodite_int2kv.int2 import reference as R
    configs = [(bn, nw, ns, bh) for bh in (8, 16) for bn, nw, ns in
               ((32, 1, 3), (64, 1, 3), (32, 2, 3), (64, 2, 3), (64, 4, 3), (128, 4, 3), (128, 4, 4), (128, 8, 3))]
    for Hq, Hkv, D, S, B, G, mults in [(32, 4, 128, 32768, 8, 32, (4, 8, 16)), (32, 4, 128, 32768, 64, 32, (1, 2)),
                                       (16, 2, 256, 32768, 32, 64, (4, 8))]:
        L = SlotLayout(D, G)
        blocks = B * math.ceil(S / 16)
        cache = random_int2_cache(L, blocks, 16, Hkv)
        table = torch.randperm(blocks, device="cuda").int().view(B, -1)
        seq = torch.full((B,), S, dtype=torch.int32, device="cuda")
        q = torch.randn(B, Hq, D, device="cuda", dtype=torch.bfloat16)
        # correctness on the first 2 sequences of 4096 tokens (reference dequantizes in fp32)
        short = torch.full((B,), 4096, dtype=torch.int32, device="cuda")
        ref = R.decode_reference(q[:2].float(), cache, table[:2], short[:2], L, D ** -0.5)
        nbytes = B * S * Hkv * L.slot_bytes
        base = pick_num_splits(B, Hkv, S, props.multi_processor_count)
        for splits in sorted({min(256, m * base) for m in mults}):
            res = []
            for bn, nw, ns, bh in configs:
                if bh > Hq // Hkv and bh != 16:
                    continue
                try:
                    got = int2_decode(q, cache, table, short, L, D ** -0.5, splits, block_n=bn,
                                      num_warps=nw, num_stages=ns, block_h=bh)[:2].float()
                    err = (got - ref).abs().max().item()
                    if not err < 2e-2:
                        raise AssertionError(f"max error {err:.3g} vs reference")
                    us = timer.median_us(lambda: int2_decode(q, cache, table, seq, L, D ** -0.5, splits,
                                                             block_n=bn, num_warps=nw, num_stages=ns,
                                                             block_h=bh), iters=10)
                except Exception as exc:
                    us = float("nan")
                    log(f"    bn={bn} nw={nw} ns={ns} bh={bh}: {str(exc).splitlines()[0][:100]}")
                res.append((us, bn, nw, ns, bh))
            best = min(r for r in res if r[0] == r[0])
            log(f"tune Hq{Hq}/kv{Hkv}/D{D} S={S} B={B} G={G} splits={splits}: " +
                 " ".join(f"{bn}/{nw}/{ns}/{bh}:{us:.0f}" for us, bn, nw, ns, bh in res) +
                f"  best {best[1]}/{best[2]}/{best[3]}/{best[4]} {best[0]:.1f} us = {nbytes / best[0] / 1e3:.0f} GB/s")
        del cache
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--contexts", default="4096,32768,131072")
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--configs", default="ratio8,tp",
                    help="Hq/Hkv/D,... and named sets: " + ", ".join(CONFIG_SETS))
    ap.add_argument("--group-sizes", default="32,64")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--instances", type=int, default=1,
                    help="int2 caches per shape, each its own allocation (all alive together), each timed: "
                         "int2_us is their median, int2_us_instances all of them (the same kernel on the same "
                         "shape varies by up to 9 %% between allocations). Variants time the first")
    ap.add_argument("--max-bf16-bytes", type=float, default=40e9)
    ap.add_argument("--tune", action="store_true", help="sweep block_n x num_warps on a few shapes first")
    ap.add_argument("--window", type=int, default=0,
                    help="also time int2 with the last R tokens read from a bf16 window cache "
                         "and K centering (4 uncentered sinks) on; the row gets int2_window_us")
    ap.add_argument("--sinks", type=int, default=4,
                    help="with --window: uncentered leading positions whose scores get -q.c (4: the K "
                         "offsets file's default skip; 16: data-free centering's usual N)")
    ap.add_argument("--window-block-size", type=int, default=48,
                    help="tokens per window page (the engine's: 48 with int2 blocks of 256, G = 32)")
    ap.add_argument("--lloyd", action="store_true",
                    help="also time Lloyd-Max levels (the engine default) on the same cache: int2_lloyd_us")
    ap.add_argument("--graph", action="store_true", help="time CUDA-graph replays (see Timer)")
    ap.add_argument("--cooldown", type=float, default=0.0,
                    help="seconds to wait after a shape's bf16 kernels before timing int2 (clocks, gpu_state)")
    ap.add_argument("--tile", choices=("folded", "per-code"), default="folded",
                    help="the int2 tile timed as int2_us: folded (the engine's for uniform levels since "
                         "the engine's) or per-code")
    ap.add_argument("--fold", action="store_true",
                    help="int2_us with the per-code tile (--tile per-code) and the "
                         "folded tile also timed on the same launch (int2_fold_us, fold_speedup)")
    ap.add_argument("--table-ahead", action="store_true",
                    help="also time the same tile with table_ahead (block-table entries a tile ahead) "
                         "flipped from the launch config's choice: int2_table_flipped_us, table_flip_speedup")
    ap.add_argument("--precompile", type=int, default=0,
                    help="compile every shape's int2 launch first in this many processes (Triton's on-disk cache "
                         "is shared): a sweep of many head shapes otherwise spends most of its time compiling")
    ap.add_argument("--tile-splits", default="0",
                    help="--format tiles: record splits per sequence to time, comma-separated (0: the planner's)")
    ap.add_argument("--k-bits", type=int, choices=(3, 4), default=3,
                    help="--format tiles: bits per key code (APHRODITE_INT2KV_K_BITS)")
    ap.add_argument("--format", choices=("tokens", "tiles"), default="tokens",
                    help="int2 format: per-token slots (int2_decode), or channel tiles (tile_split_decode)")
    ap.add_argument("--out", default="decode_attention_h200.json")
    args = ap.parse_args()
    if args.fold:
        args.tile = "per-code"
    main_fold = args.tile == "folded"

    timer = Timer(graph=args.graph)
    copy_gbps = copy_bandwidth(timer)
    props = torch.cuda.get_device_properties(0)
    env = {"gpu": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
           "triton": __import__("triton").__version__, "date": datetime.date.today().isoformat(),
           "python": platform.python_version(), "command": " ".join(sys.argv),
           "timing": "CUDA-graph replay" if args.graph else "eager launches"}
    log(f"{env}\ncopy bandwidth {copy_gbps:.0f} GB/s")
    if args.tune:
        tune(timer, props, args)
    if args.precompile:     # the main int2 launch of every shape (variants compile when timed)
        jobs = {}
        for Hq, Hkv, D in expand_configs(args.configs):
            for B in map(int, args.batches.split(",")):
                for G in [G for G in map(int, args.group_sizes.split(",")) if D % G == 0]:
                    cfg = decode_launch_config(B, Hkv, Hq // Hkv, D, props.multi_processor_count, fold=main_fold)
                    job = ("", "aphrodite_int2kv", Hq, Hkv, D, G, args.block_size, B, cfg.num_splits, cfg.kwargs())
                    jobs.setdefault(repr(job), job)
        precompile(list(jobs.values()), args.precompile)
    rows = []
    for Hq, Hkv, D in expand_configs(args.configs):
        scale = D ** -0.5
        for S in map(int, args.contexts.split(",")):
            for B in map(int, args.batches.split(",")):
                bf16 = {}
                timer.eager = {}
                if 2 * B * Hkv * S * D * 2 <= args.max_bf16_bytes:
                    q = torch.randn(B, Hq, D, device="cuda", dtype=torch.bfloat16)
                    k = torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16)
                    v = torch.randn_like(k)
                    bf16.update(bench_bf16_sdpa(timer, q, k, v, scale))
                    bf16.update(bench_aphrodite_triton(timer, q, k, v, args.block_size, scale))
                    del k, v
                    torch.cuda.empty_cache()
                best = min(bf16, key=bf16.get) if bf16 else None
                after_bf16 = gpu_state()
                if args.cooldown:
                    time.sleep(args.cooldown)
                if args.format == "tiles":
                    rows.extend(tiles_row(timer, args, B, S, Hq, Hkv, D, bf16, best, copy_gbps, env))
                for G in map(int, args.group_sizes.split(",")) if args.format == "tokens" else ():
                    if D % G:
                        continue
                    L = SlotLayout(D, G)
                    blocks = B * math.ceil(S / args.block_size)
                    cache = random_int2_cache(L, blocks, args.block_size, Hkv)
                    table = torch.randperm(blocks, device="cuda").int().view(B, -1)
                    seq = torch.full((B,), S, dtype=torch.int32, device="cuda")
                    q = torch.randn(B, Hq, D, device="cuda", dtype=torch.bfloat16)
                    cfg = decode_launch_config(B, Hkv, Hq // Hkv, D, props.multi_processor_count, fold=main_fold)
                    splits = cfg.num_splits

                    def launch(**kw):
                        """int2_decode's arguments as the engine launches the tile kw asks for (the
                        launch config depends on it: table_ahead), overridden by kw."""
                        folded = kw.get("fold", False) and not kw.get("lloyd_max", False)
                        return dict(decode_launch_config(B, Hkv, Hq // Hkv, D, props.multi_processor_count,
                                                         fold=folded).kwargs(), **kw)
                    out = torch.empty_like(q)
                    slots = partial_slots(splits, args.sinks, args.window)    # room for every partial result
                    ws = (torch.empty(B * Hq * slots * D, device="cuda"), torch.empty(B * Hq * slots, device="cuda"))
                    fn = lambda: int2_decode(q, cache, table, seq, L, scale, splits, out=out,  # noqa: E731
                                             workspace=ws, **launch(fold=main_fold))
                    before_int2 = gpu_state()
                    first, kept, int2_all = (cache, table), [], []
                    for i in range(args.instances):
                        if i:   # another allocation, the earlier ones kept alive (so not the same pages)
                            cache = random_int2_cache(L, blocks, args.block_size, Hkv)
                            table = torch.randperm(blocks, device="cuda").int().view(B, -1)
                            kept.append(cache)
                        try:
                            int2_all.append(timer.median_us(fn, iters=args.iters))
                        except Exception:
                            traceback.print_exc()
                            int2_all.append(float("nan"))
                    int2_us = statistics.median(int2_all)
                    cache, table = first
                    del kept
                    gpu = dict(after_bf16=after_bf16, before_int2=before_int2, after_int2=gpu_state())
                    extra = {}
                    def variant(name, **kw):
                        """Time the same launch with other int2_decode options; its largest
                        difference from the main output."""
                        fnv = lambda: int2_decode(q, cache, table, seq, L, scale, splits, out=out,  # noqa: E731
                                                  workspace=ws, **launch(**kw))
                        try:
                            fn()
                            ref_out = out.clone()
                            fnv()
                            err = (out.float() - ref_out.float()).abs().max().item()
                            v_us = timer.median_us(fnv, iters=args.iters)
                        except Exception:
                            traceback.print_exc()
                            v_us, err = float("nan"), float("nan")
                        log(f"    {name}: {v_us:.1f} us ({int2_us / v_us:.2f}x the {args.tile} tile as is; "
                            f"max |diff| {err:.2e})")
                        return round(v_us, 2), round(int2_us / v_us, 3), err

                    if args.fold:   # the folded tile (kernels/folded.py int2_tile_folded), same launch
                        us, sp, err = variant("folded tile", fold=True)
                        extra.update(int2_fold_us=us, fold_speedup=sp, fold_max_abs_diff=err)
                    if args.table_ahead:   # the split loop with block-table entries a tile ahead, or not
                        us, sp, err = variant(f"table ahead {'off' if cfg.table_ahead else 'on'}", fold=main_fold,
                                              table_ahead=not cfg.table_ahead)
                        extra.update(int2_table_flipped_us=us, table_flip_speedup=sp, table_flip_max_abs_diff=err)
                    if args.lloyd:
                        fnl = lambda: int2_decode(q, cache, table, seq, L, scale, splits, out=out,  # noqa: E731
                                                  workspace=ws, **launch(lloyd_max=True))
                        try:
                            l_us = timer.median_us(fnl, iters=args.iters)
                        except Exception:
                            traceback.print_exc()
                            l_us = float("nan")
                        extra.update(int2_lloyd_us=round(l_us, 2), lloyd_overhead=round(l_us / int2_us - 1, 3))
                        log(f"    Lloyd-Max levels: {l_us:.1f} us ({l_us / int2_us - 1:+.1%} vs uniform)")
                    if args.window:
                        # window cache pages as the engine sizes them (window block = int2 block x
                        # slot / (4 D) so both pages have the same bytes; 48 for int2 blocks of 256
                        # at G = 32). Only the blocks of the last R positions get pages, as in a
                        # sliding-window cache; older logical blocks point at page 0, never read.
                        wbs = args.window_block_size
                        k_win, v_win, wtable, _ = window_pages(B, S, Hkv, D, args.window, wbs)
                        cen = torch.randn(B, Hkv, D, device="cuda")     # per-sequence offsets (data-free)
                        variants = {"sinks": dict(k_center=cen, sinks=args.sinks),
                                    "window": dict(window=(k_win, v_win, wtable, args.window)),
                                    "window+sinks": dict(k_center=cen, sinks=args.sinks, window=(k_win, v_win, wtable, args.window))}
                        base_us = extra.get("int2_lloyd_us", int2_us)   # the window's cost over the same levels
                        times = {}
                        for name, kw in variants.items():
                            kw = dict(kw, lloyd_max=bool(args.lloyd), fold=main_fold and not args.lloyd)
                            fnw = lambda: int2_decode(q, cache, table, seq, L, scale, splits, out=out,  # noqa: E731
                                                      workspace=ws, **launch(**kw))
                            try:
                                times[name] = timer.median_us(fnw, iters=args.iters)
                            except Exception:
                                traceback.print_exc()
                                times[name] = float("nan")
                        w_us = times["window+sinks"]
                        extra.update(window=args.window, window_block_size=wbs, sinks=args.sinks, int2_window_us=round(w_us, 2),
                                     int2_sinks_only_us=round(times["sinks"], 2),
                                     int2_window_only_us=round(times["window"], 2),
                                     window_overhead=round(w_us / base_us - 1, 3))
                        log(f"    window {args.window} + centering sinks: {w_us:.1f} us ({w_us / base_us - 1:+.1%} vs int2); "
                            f"sinks only {times['sinks'] / base_us - 1:+.1%}, window only {times['window'] / base_us - 1:+.1%}")
                        del k_win, v_win
                    nbytes = B * S * Hkv * L.slot_bytes
                    row = dict(context_len=S, batch=B, num_q_heads=Hq, num_kv_heads=Hkv, head_dim=D,
                               group_size=G, block_size=args.block_size, num_splits=splits, block_n=cfg.block_n,
                               table_ahead=cfg.table_ahead,
                               num_warps=cfg.num_warps, num_stages=cfg.num_stages, block_h=cfg.block_h,
                               rows_on_m=cfg.rows_on_m, partial_dtype=str(cfg.partial_dtype).replace("torch.", ""),
                               int2_tile=args.tile, int2_us=round(int2_us, 2),
                               int2_us_instances=[round(u, 2) for u in int2_all],
                               bf16_us=round(bf16[best], 2) if best else None, bf16_kernel=best,
                               bf16_all_us={k: round(v, 2) for k, v in bf16.items()},
                               speedup=round(bf16[best] / int2_us, 3) if best else None,
                               int2_bytes_read=nbytes, int2_GBps=round(nbytes / int2_us / 1e3, 1),
                               copy_GBps=round(copy_gbps, 1),
                               frac_copy=round(nbytes / int2_us / 1e3 / copy_gbps, 3), gpu_state=gpu,
                               cooldown_s=args.cooldown, eager_launches=dict(timer.eager), **extra, **{"env": env})
                    rows.append(row)
                    log(f"Hq{Hq}/kv{Hkv}/D{D} S={S:>6} B={B:>2} G={G:>3}: int2 {int2_us:8.1f} us "
                        f"({row['int2_GBps']:6.0f} GB/s, {row['frac_copy']:.0%} of copy; instances "
                        f"{'/'.join(f'{u:.1f}' for u in int2_all)})  "
                        f"bf16 {row['bf16_us']} us [{best}]  speedup {row['speedup']}  "
                        f"SM MHz {after_bf16.get('sm_mhz')}/{before_int2.get('sm_mhz')}/{gpu['after_int2'].get('sm_mhz')}")
                    del cache
                    torch.cuda.empty_cache()
                with open(args.out, "w") as f:
                    json.dump(rows, f, indent=1)
    log(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
