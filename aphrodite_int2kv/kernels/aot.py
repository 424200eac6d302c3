"""Ahead-of-time compile check: every kernel, in every launch the engine can plan, compiled with
Triton's own compiler for the GPUs in limits.TARGETS, no GPU needed (ptxas ships with Triton).

    python -m aphrodite_int2kv.kernels.aot [--targets a100,rtx4090] [--json FILE]

The launches are not written out by hand: the public wrappers (int2_decode, int2_prefill,
int2_store, window_store, sequence_centers) are called on CPU tensors with the launch their
planner picks for the target, while `recorded_launches` catches each `kernel[grid](...)` before
it runs. Each caught launch is then bound and specialized by Triton's own binder for that target,
exactly as a launch on such a GPU would be, and compiled. A launch fails the check when it does
not compile, needs more shared memory per block than the target allows, or spills registers
(a stack frame) where the same launch planned for the H200 does not.

Must run without TRITON_INTERPRET (under it the kernels are interpreted functions); the CI test
runs it in a subprocess.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile

import torch
import triton
from triton.runtime.jit import JITFunction

from aphrodite_int2kv.kernels.limits import PRESETS, TARGETS, DeviceLimits


@dataclasses.dataclass
class Launch:
    kernel: JITFunction
    args: tuple
    kwargs: dict
    label: str = ""
    budget: tuple[int, int] | None = None     # (registers, shared bytes) the planner assumed

    @property
    def name(self) -> str:
        return self.kernel.__name__


@contextlib.contextmanager
def recorded_launches():
    """Within the block, `kernel[grid](...)` records a Launch instead of running (a list, yielded)."""
    caught: list[Launch] = []
    real = JITFunction.run

    def record(self, *args, grid, warmup, **kwargs):
        caught.append(Launch(self, args, dict(kwargs)))

    JITFunction.run = record
    try:
        yield caught
    finally:
        JITFunction.run = real


@dataclasses.dataclass
class Usage:
    kernel: str
    label: str
    target: str
    registers: int
    stack: int          # bytes of stack frame per thread: register spills (and local arrays)
    shared: int         # bytes of shared memory per block
    limit: int          # the target's shared memory per block
    error: str = ""
    budget: tuple[int, int] | None = None

    @property
    def fits(self) -> bool:
        return not self.error and self.shared <= self.limit


def _cuobjdump() -> str:
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def specialize(launch: Launch, limits: DeviceLimits):
    """(ASTSource, target, options, cache key) of `launch` on `limits`' GPU: bound and specialized by Triton's
    binder for that target, as JITFunction.run does on such a GPU."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    fn = launch.kernel
    target = GPUTarget("cuda", limits.target, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    kwargs = dict(launch.kwargs, debug=False)
    bound_args, specialization, options = binder(*launch.args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound_args, specialization, options)
    key = (fn.__name__, limits.target, repr(signature), repr(constexprs), repr(attrs),
           repr(sorted(options.__dict__.items())))
    return ASTSource(fn, signature, constexprs, attrs), target, options.__dict__, key


_compiled: dict = {}


def usage(launch: Launch, limits: DeviceLimits) -> Usage:
    """Registers, stack frame and shared memory of `launch` compiled for `limits`' GPU (launches that
    specialize alike are compiled once)."""
    try:
        src, target, options, key = specialize(launch, limits)
        if key not in _compiled:
            ck = triton.compile(src, target=target, options=options)
            with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
                f.write(ck.asm["cubin"])
                f.flush()
                out = subprocess.run([_cuobjdump(), "--dump-resource-usage", f.name], capture_output=True,
                                     text=True).stdout
            regs = re.search(r"REG:(\d+)", out)
            stack = re.search(r"STACK:(\d+)", out)
            _compiled[key] = (int(regs.group(1)) if regs else -1, int(stack.group(1)) if stack else -1,
                              int(ck.metadata.shared))
    except Exception as e:      # a compile failure is the finding, not a crash of the check
        msg = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        return Usage(launch.name, launch.label, limits.name, 0, 0, 0, limits.smem_per_block, msg[:300], launch.budget)
    regs, stack, shared = _compiled[key]
    return Usage(launch.name, launch.label, limits.name, regs, stack, shared, limits.smem_per_block,
                 budget=launch.budget)


# ---- the launches the engine can plan ----------------------------------------------------------

def _cache(blocks, block_size, hkv, layout):
    return torch.zeros(blocks, block_size, hkv, layout.slot_bytes, dtype=torch.uint8)


def engine_launches(limits: DeviceLimits, head_dims=(64, 128, 256)) -> list[Launch]:
    """Every kernel launch the engine's planners choose on `limits`' GPU for the shipped options
    and the level modes (std / minmax share the uniform tiles; lloyd-max the per-code one):
    store (with and without K centering), the window store, the data-free centers, decode (the
    batch shapes that pick the distinct tiles, short shares and merges), prefill."""
    from aphrodite_int2kv.int2.format import SlotLayout, default_group_size
    from aphrodite_int2kv.kernels.centers import sequence_centers
    from aphrodite_int2kv.kernels.decode import decode_launch_config, int2_decode, split_registers, split_shared
    from aphrodite_int2kv.kernels.prefill import int2_prefill, prefill_launch_config, prefill_shared
    from aphrodite_int2kv.kernels.store import Centering, int2_store, window_store

    dt = torch.bfloat16
    found: list[Launch] = []
    for D in head_dims:
        G = default_group_size(D)
        layout = SlotLayout(D, G)
        bs, hkv, ratio, B = 16, 4, 8, 8
        hq = hkv * ratio
        cache = _cache(64, bs, hkv, layout)
        table = torch.arange(64, dtype=torch.int32).view(B, 8)
        lens = torch.full((B,), 100, dtype=torch.int32)
        win = (torch.zeros(32, 16, hkv, D, dtype=dt), torch.zeros(32, 16, hkv, D, dtype=dt),
               torch.arange(32, dtype=torch.int32).view(B, 4), 128)
        center = torch.zeros(B, hkv, D, dtype=torch.float32)

        def catch(label, call):
            with recorded_launches() as caught:
                call()
            for launch in caught:
                launch.label = f"D{D} {label}"
            found.extend(caught)

        kv = torch.zeros(B, hkv, D, dtype=dt)
        slots = torch.arange(B, dtype=torch.int32)
        pos = torch.arange(B, dtype=torch.int32)
        catch("store", lambda: int2_store(kv, kv, slots, cache, layout, std_range=True,
                                          centering=Centering(center, slots, pos, 4), only=2))
        catch("store lloyd", lambda: int2_store(kv, kv, slots, cache, layout, lloyd_max=True))
        catch("window store", lambda: window_store(kv, kv, slots, win[0], win[1]))
        catch("centers", lambda: sequence_centers(cache, table, lens, layout, 16))
        # decode: batch 1 (small-batch merge), 8 (short shares), 64 (large-batch merge), each tile;
        # and few KV heads with many query heads (tensor parallelism, multi-query models): ratio 24
        # on one KV head takes the large head tiles (decode.block_h_for, split_warps)
        decodes = [(hkv, ratio, b, fold, "folded" if fold else "per-code")
                   for b, fold in ((1, True), (8, True), (64, True), (8, False))]
        decodes += [(1, 24, b, True, "24q/1kv") for b in (8, 64)]
        for heads, r, batch, fold, tag in decodes:
            cfg = decode_launch_config(batch, heads, r, D, limits=limits, fold=fold)
            q = torch.zeros(batch, heads * r, D, dtype=dt)
            pages = cache if heads == hkv else _cache(64, bs, heads, layout)
            w = (win[0][:, :, :heads].contiguous(), win[1][:, :, :heads].contiguous(),
                 torch.zeros(batch, 4, dtype=torch.int32), 128)
            catch(f"decode b{batch} {tag}",
                  lambda: int2_decode(q, pages, torch.zeros(batch, 8, dtype=torch.int32),
                                      torch.full((batch,), 100, dtype=torch.int32), layout, 0.1, cfg.num_splits,
                                      lloyd_max=not fold, **cfg.kwargs(), sinks=4,
                                      k_center=torch.zeros(batch, heads, D), window=w, limits=limits))
            # the occupancy the split count was planned for (decode.programs_per_sm)
            found[-2].budget = (split_registers(D, cfg.block_h, fold)[0],
                                split_shared(D, G, cfg.block_n, cfg.num_stages, cfg.block_h))
        # prefill with and without the window, uniform and Lloyd-Max levels
        T = 64
        q = torch.zeros(T, hq, D, dtype=dt)
        k = torch.zeros(T, hkv, D, dtype=dt)
        qsl = torch.tensor([0, T], dtype=torch.int32)
        sl = torch.tensor([T + 100], dtype=torch.int32)
        for lloyd in (False, True):
            catch(f"prefill{' lloyd' if lloyd else ''}",
                  lambda: int2_prefill(q, k, k, cache, table[:1], qsl, sl, T, layout, 0.1, lloyd_max=lloyd,
                                       sinks=4, k_center=torch.zeros(1, hkv, D),
                                       window=(win[0], win[1], win[2][:1], 128), limits=limits))
            found[-1].budget = (255, prefill_shared(D, prefill_launch_config(D, limits), limits))
    return found


def tile_format_launches(limits: DeviceLimits, head_dims=(64, 128, 256)) -> list[Launch]:
    """The channel-tile format's kernels: the store at tiles of 32 and 64 tokens, and the attention
    the engine runs (FORMAT=tiles: tiles of 64): the split decode and its merge, and the
    prefill/decode launch (`--tile-format`)."""
    from aphrodite_int2kv.int2.tile_format import K_BITS, TILES, TilePages, TileLayout
    from aphrodite_int2kv.kernels.tile_attention import tile_attention
    from aphrodite_int2kv.kernels.tile_split_decode import tile_split_decode
    from aphrodite_int2kv.kernels.tile_store import tile_store

    found: list[Launch] = []
    for D in head_dims:
        for T, k_bits in [(T, 3) for T in TILES] + [(64, 4)]:
            layout = TileLayout(D, T, k_bits)
            kv = torch.zeros(4, 2, T, D)
            records = torch.zeros(4, 2, layout.tile_bytes, dtype=torch.uint8)
            with recorded_launches() as caught:
                tile_store(kv, kv, torch.zeros(4, dtype=torch.int32), torch.zeros(4, dtype=torch.int64), records, layout)
            for launch in caught:
                launch.label = f"D{D} tile {T}" + (" K4" if k_bits == 4 else "")
            found.extend(caught)
        for k_bits in K_BITS:       # the engine's tiles of 64, 3- and 4-bit keys (APHRODITE_INT2KV_K_BITS)
            layout = TileLayout(D, 64, k_bits)
            tag = " K4" if k_bits == 4 else ""
            pages = TilePages.of_cache(torch.zeros(4, 2, 128, layout.token_bytes, dtype=torch.uint8).transpose(1, 2),
                                       layout)
            q, kv = torch.zeros(64, 8, D, dtype=torch.bfloat16), torch.zeros(64, 2, D, dtype=torch.bfloat16)
            win = torch.zeros(8, 16, 2, D, dtype=torch.bfloat16)
            table = torch.zeros(2, 4, dtype=torch.int32)
            for name, q_len in (("decode", 1), ("prefill", 64)):
                with recorded_launches() as caught:
                    tile_attention(q[:q_len], kv[:q_len], kv[:q_len], pages, table[:1],
                                   torch.tensor([0, q_len], dtype=torch.int32), torch.tensor([q_len + 500], dtype=torch.int32),
                                   q_len, 0.1, (win, win, table[:1], 128))
                for launch in caught:
                    launch.label = f"D{D} tile 64{tag} attention {name}"
                found.extend(caught)
            for ratio in (4, 20):       # the split decode and its merge: one head tile, and two
                qd = torch.zeros(2, 2 * ratio, D, dtype=torch.bfloat16)
                with recorded_launches() as caught:
                    tile_split_decode(qd, kv[:2], kv[:2], pages, table, torch.tensor([600, 70], dtype=torch.int32), 0.1,
                                      (win, win, table, 128), num_splits=3)
                for launch in caught:
                    launch.label = f"D{D} tile 64{tag} split decode, {ratio} q heads per KV head"
                found.extend(caught)
        layout = TileLayout(D, 64)
        pages = TilePages.of_cache(torch.zeros(4, 2, 128, layout.token_bytes, dtype=torch.uint8).transpose(1, 2), layout)
        if D == 64:                 # learned sink logits (gpt-oss: head_dim 64, 8 q heads per KV head)
            qd = torch.zeros(2, 16, D, dtype=torch.bfloat16)
            with recorded_launches() as caught:
                tile_attention(qd[:1].expand(64, 16, D), kv, kv, pages, table[:1], torch.tensor([0, 64], dtype=torch.int32),
                               torch.tensor([564], dtype=torch.int32), 64, 0.1, (win, win, table[:1], 128),
                               sinks_log2=torch.zeros(16))
                tile_split_decode(qd, kv[:2], kv[:2], pages, table, torch.tensor([600, 70], dtype=torch.int32), 0.1,
                                  (win, win, table, 128), num_splits=3, sinks_log2=torch.zeros(16))
            for launch in caught:
                launch.label = f"D{D} tile 64 with sink logits"
            found.extend(caught)
    return found


def check(targets=TARGETS, head_dims=(64, 128, 256), progress=True, only: str = "",
          tile_format: bool = False) -> tuple[list[Usage], list[str]]:
    """Compile the engine's launches (or, with `tile_format`, the channel-tile format's) for each
    target. Returns (usages, problems): a problem is a launch that fails to compile, does not fit
    the target's shared memory, or spills where the H200's plan of the same launch does not."""
    h200 = {}
    for u in _usages(PRESETS["h200"], head_dims, progress, only, tile_format):
        h200[(u.kernel, u.label)] = u
    results, problems = list(h200.values()), []
    for name in targets:
        limits = PRESETS[name]
        rows = list(h200.values()) if name == "h200" else _usages(limits, head_dims, progress, only, tile_format)
        if name != "h200":
            results.extend(rows)
        for u in rows:
            base = h200.get((u.kernel, u.label))
            if u.error:
                problems.append(f"{name}: {u.kernel} [{u.label}] does not compile: {u.error}")
            elif not u.fits:
                problems.append(f"{name}: {u.kernel} [{u.label}] needs {u.shared} B of shared memory, "
                                f"the GPU allows {u.limit} per block")
            elif u.stack > 0 and (base is None or base.stack == 0):
                problems.append(f"{name}: {u.kernel} [{u.label}] spills ({u.stack} B stack frame) "
                                f"where the H200's launch does not")
            if u.budget and not u.error and (u.registers > u.budget[0] or u.shared > u.budget[1]):
                problems.append(f"{name}: {u.kernel} [{u.label}] takes {u.registers} registers and {u.shared} B "
                                f"of shared memory; its split count was planned for {u.budget[0]} and "
                                f"{u.budget[1]} (decode.split_registers / split_shared, prefill.SHARED)")
    return results, problems


def _usages(limits, head_dims, progress, only="", tile_format=False):
    plan = tile_format_launches if tile_format else engine_launches
    launches = [la for la in plan(limits, head_dims) if only in la.label]
    out = []
    for i, launch in enumerate(launches):
        if progress:
            print(f"\r[{limits.name}] {i + 1}/{len(launches)} {launch.name} [{launch.label}]".ljust(100),
                  end="", file=sys.stderr, flush=True)
        out.append(usage(launch, limits))
    if progress:
        print(file=sys.stderr)
    return out


def table(results: list[Usage]) -> str:
    """Markdown: registers / stack / shared KB per launch (rows) and target (columns)."""
    targets = list(dict.fromkeys(u.target for u in results))
    rows = list(dict.fromkeys((u.kernel, u.label) for u in results))
    cell = {(u.kernel, u.label, u.target): u for u in results}
    lines = ["| kernel | launch | " + " | ".join(targets) + " |", "|---|---|" + "---|" * len(targets)]
    for kernel, label in rows:
        cells = []
        for t in targets:
            u = cell.get((kernel, label, t))
            cells.append("" if u is None else "error" if u.error else
                         f"{u.registers} r / {u.stack} B / {u.shared / 1024:.0f} KB" + ("" if u.fits else " **too big**"))
        lines.append(f"| `{kernel.lstrip('_')}` | {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", default=",".join(TARGETS), help=f"presets to compile for (of {', '.join(PRESETS)})")
    ap.add_argument("--head-dims", default="64,128,256")
    ap.add_argument("--only", default="", help="launches whose label holds this (e.g. 'prefill', 'decode b8')")
    ap.add_argument("--tile-format", action="store_true",
                    help="the channel-tile format's kernels (store, first decode) instead of the engine's launches")
    ap.add_argument("--json", help="write every launch's registers / stack / shared memory here")
    ap.add_argument("--markdown", help="write the table (docs/gpus.md's) here")
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        ap.error("unset TRITON_INTERPRET: the check compiles the kernels, it cannot interpret them")
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    for t in targets:
        if t not in PRESETS:
            ap.error(f"--targets: {t!r} is not a preset ({', '.join(PRESETS)})")
    results, problems = check(targets, tuple(int(d) for d in args.head_dims.split(",")), only=args.only,
                              tile_format=args.tile_format)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"triton": triton.__version__, "usages": [dataclasses.asdict(u) for u in results],
                       "problems": problems}, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table(results) + "\n")
    print(table(results))
    for p in problems:
        print("PROBLEM", p)
    print(f"{len(results)} launches compiled, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
