#!/usr/bin/env python3
"""Where a decode launch's time goes, program by program (GPU): a traced copy of this tree's
kernels stamps the GPU's global nanosecond clock (%globaltimer) at each split program's entry,
after its first tile, and at its end (with its multiprocessor), and at each merge program's entry,
after its wait for the split launch, and at its end. Printed as percentiles relative to the first
split program's entry: how long the wave takes to start, the prologue before data flows, the
steady state, the spread of the ends (the wave waits for its last program) and the merge after it.

The traced copy is made here (package `int2kv_trace` in a temporary folder): the stamps are
inserted at anchors of the kernel source, each checked to occur once, and write to a buffer
whose address is compiled in. The stamps cost a few instructions per tile; the untraced and
traced launches are both timed (CUDA-graph replays, as decode_attention.py) to show by how much.

The stamps are taken twice: from eager launches (rows' plain keys; the host launches the merge
tens of microseconds after the split launch, so the merge's entry there can wait for the host),
and from a CUDA-graph replay (keys `graph_*`, as decode_attention.py and the engine replay decode),
with a one-program marker kernel before and after the decode in the graph: `graph_mark_before_us`
and `graph_mark_after_us` place the graph's neighbouring nodes on the same clock, and
`graph_event_us` is the event time of that replay (markers included).

  python3 benchmarks/decode_timeline.py --shapes 32/4/128/32768/8 --out $OUT/timeline.json
"""
import argparse
import json
import pathlib
import sys

import torch
import triton
import triton.language as tl

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.decode_ab import paged_batch  # noqa: E402
from benchmarks.decode_attention import Timer  # noqa: E402
from benchmarks.package_copy import import_copy, renamed_copy  # noqa: E402
from aphrodite_int2kv.int2.format import SlotLayout  # noqa: E402
from aphrodite_int2kv.kernels import decode as untraced  # noqa: E402

SLOTS = 4   # int64 per program: split (entry, first tile done, end, SM id), merge (entry, after wait, end, -)

STAMP = '''

@triton.jit
def _now(x):
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [x], dtype=tl.int64, is_pure=False,
                                     pack=1)


@triton.jit
def _smid(x):
    return tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [x], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _trace_ptr(addr, program):
    return (tl.full([], addr, tl.int64) + program.to(tl.int64) * {slots} * 8).to(tl.pointer_type(tl.int64))
'''.format(slots=SLOTS)


def _patch(path: pathlib.Path, edits):
    text = path.read_text()
    for old, new in edits:
        n = text.count(old)
        if n != 1:
            raise SystemExit(f"decode_timeline: anchor found {n} times in {path.name} (the kernels changed; "
                             f"update the anchors): {old!r}")
        text = text.replace(old, new)
    path.write_text(text)


def traced_package(split_addr: int, merge_addr: int, floor: bool = False):
    """Import a copy of aphrodite_int2kv as int2kv_trace with the stamps compiled in; `floor`: with
    decode_floor.py's tile in place of the folded tile (most of its math taken out)."""
    pkg = renamed_copy("int2kv_trace")
    split_here = "tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)"
    _patch(pkg / "kernels" / "folded.py", [
        ("import triton.language as tl\n", "import triton.language as tl\n" + STAMP),
        ("    for n0 in range(lo, hi, N):\n        nmask, page_next, kbytes, vwords,",
         "    t_first = tl.full([], 9223372036854775807, tl.int64)\n"
         "    for n0 in range(lo, hi, N):\n        nmask, page_next, kbytes, vwords,"),
        ("kbytes, vwords, k_scale, k_zero, v_scale, v_zero, nmask, ROWS, N, W, G, NG, DOT, FAST)\n",
         "kbytes, vwords, k_scale, k_zero, v_scale, v_zero, nmask, ROWS, N, W, G, NG, DOT, FAST)\n"
         "        t_first = tl.where(n0 == lo, _now(n0), t_first)\n"
         f"    tl.atomic_min(_trace_ptr({split_addr}, {split_here}) + 1, t_first)\n"),
    ])
    _patch(pkg / "kernels" / "decode.py", [
        ("from aphrodite_int2kv".replace("aphrodite_int2kv", "int2kv_trace") + ".kernels.folded import",
         "from int2kv_trace.kernels.folded import _now, _smid, _trace_ptr\nfrom int2kv_trace.kernels.folded import"),
        ("    program = tl.program_id(0)\n    if UPSTREAM_HEAD_MAP:",
         "    program = tl.program_id(0)\n    t_entry = _now(program)\n    if UPSTREAM_HEAD_MAP:"),
        ("        first += n_tiles\n        batch += 1\n    if AFTER_TAIL:",
         "        first += n_tiles\n        batch += 1\n"
         f"    trace = _trace_ptr({split_addr}, {split_here})\n"
         "    tl.store(trace, t_entry)\n    tl.store(trace + 2, _now(program))\n"
         "    tl.store(trace + 3, _smid(program).to(tl.int64))\n    if AFTER_TAIL:"),
        ("    dims = tl.program_id(2) * DC + tl.arange(0, DC)\n",
         "    dims = tl.program_id(2) * DC + tl.arange(0, DC)\n    t_entry = _now(batch)\n"),
        ("    for c0 in range(0, count, CHUNK):\n        k = c0 + tl.arange(0, CHUNK)",
         "    t_wait = _now(batch)\n"
         "    for c0 in range(0, count, CHUNK):\n        k = c0 + tl.arange(0, CHUNK)"),
        ("    tl.store(out_ptr + batch * stride_ob + head * stride_oh + dims, out.to(out_ptr.dtype.element_ty))\n",
         "    tl.store(out_ptr + batch * stride_ob + head * stride_oh + dims, out.to(out_ptr.dtype.element_ty))\n"
         f"    trace = _trace_ptr({merge_addr}, (batch * tl.num_programs(1) + head) * tl.num_programs(2) "
         "+ tl.program_id(2))\n"
         "    tl.store(trace, t_entry)\n    tl.store(trace + 1, t_wait)\n    tl.store(trace + 2, _now(batch))\n"),
    ])
    if floor:
        from benchmarks.decode_floor import replace_tile
        replace_tile(pkg / "kernels" / "folded.py")
    return import_copy(pkg)


@triton.jit
def _mark_kernel(ptr):
    """One program: the GPU's global nanosecond clock -> ptr[0] (a graph's neighbouring node)."""
    t = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [tl.program_id(0)], dtype=tl.int64,
                                  is_pure=False, pack=1)
    tl.store(ptr, t)


def pct(x: torch.Tensor, qs=(0.0, 0.1, 0.5, 0.9, 0.99, 1.0)):
    x = x.double().sort().values
    return {f"p{int(q * 100)}": round(float(x[min(len(x) - 1, int(q * (len(x) - 1) + 0.5))]), 2) for q in qs}


def per_sm(s: torch.Tensor, t0: int, sms: int) -> dict:
    """Is the spread of the split programs' ends within multiprocessors or between them? Per SM:
    its last end and the range of its programs' ends; the correlation, within SMs, of a program's
    rank by entry with its rank by end (greedy warp scheduling favours the oldest warps)."""
    end = (s[:, 2] - t0).double() / 1e3
    sm = s[:, 3].long()
    last, spread, corr = [], [], []
    for i in range(sms):
        idx = (sm == i).nonzero().flatten()
        if len(idx) < 2:
            continue
        e = end[idx]
        last.append(float(e.max()))
        spread.append(float(e.max() - e.min()))
        r_entry = s[idx, 0].argsort().argsort().double()
        r_end = e.argsort().argsort().double()
        corr.append(float(torch.corrcoef(torch.stack([r_entry, r_end]))[0, 1]))
    t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    return dict(sm_last_end_us=pct(t(last)), sm_end_range_us=pct(t(spread)),
                entry_rank_vs_end_rank_corr=pct(t(corr)))


def timeline(shape, cfg, kw, q, cache, table, seq, L, traced, timer, split_buf, merge_buf, repeats, sms, raw,
             floor=False):
    """One launch configuration's stamps (median of `repeats` traced launches) -> a summary row."""
    B, Hq, D = q.shape
    Hkv = cache.shape[2]
    max_programs, max_merge = split_buf.numel() // SLOTS, merge_buf.numel() // SLOTS
    n_split = cfg.num_splits * B * Hkv * -(-(Hq // Hkv) // cfg.block_h)
    assert n_split <= max_programs and B * Hq * kw.get("merge_split", 1) <= max_merge
    plain = lambda: untraced.int2_decode(q, cache, table, seq, L, D ** -0.5, cfg.num_splits, **kw)  # noqa: E731
    stamped = lambda: traced.int2_decode(q, cache, table, seq, L, D ** -0.5, cfg.num_splits, **kw)  # noqa: E731
    us_plain, us_traced = timer.median_us(plain), timer.median_us(stamped)
    out_plain, out_traced = plain(), stamped()
    torch.cuda.synchronize()
    # (the floor's output is not attention: nothing to compare)
    assert floor or torch.equal(out_plain, out_traced), "the traced kernels compute something else"
    marks = torch.zeros(2, dtype=torch.int64, device="cuda")

    def marked():
        _mark_kernel[(1,)](marks[0:])
        stamped()
        _mark_kernel[(1,)](marks[1:])
    marked()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        marked()
    torch.cuda.synchronize()

    def stamps(launch):
        """The median (by span) of `repeats` runs of launch -> (span ns, split, merge stamps, t0, event us)."""
        runs = []
        for _ in range(repeats):
            split_buf.fill_(-1)
            split_buf.view(-1, SLOTS)[:, 1] = (1 << 63) - 1
            merge_buf.fill_(-1)
            marks.zero_()
            timer.flush.zero_()
            torch.cuda.synchronize()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            launch()
            e1.record()
            torch.cuda.synchronize()
            s = split_buf.view(-1, SLOTS)[:n_split].cpu()
            m = merge_buf.view(-1, SLOTS)[:B * Hq * kw.get("merge_split", 1)].cpu()
            assert (s[:, 0] > 0).all() and (m[:, 2] > 0).all(), "a program left no stamp"
            t0 = int(s[:, 0].min())
            runs.append((int(m[:, 2].max()) - t0, s, m, t0, e0.elapsed_time(e1) * 1000.0, marks.cpu()))
        runs.sort(key=lambda r: r[0])
        return runs[len(runs) // 2]

    span, s, m, t0, _, _ = stamps(stamped)
    us = lambda col, t0=t0: (col - t0).double() / 1e3  # noqa: E731
    has_tile = s[:, 1] < (1 << 62)
    row = dict(shape=shape, merge=f"{kw.get('merge_split', 1)}/{kw.get('merge_warps', 4)}", num_splits=cfg.num_splits, split_programs=n_split, launch=repr(cfg),
               event_us_untraced=round(us_plain, 2), event_us_traced=round(us_traced, 2),
               stamped_span_us=round(span / 1e3, 2),
               split_entry_us=pct(us(s[:, 0])), split_first_tile_us=pct(us(s[has_tile, 1])),
               split_end_us=pct(us(s[:, 2])), split_duration_us=pct(us(s[:, 2]) - us(s[:, 0])),
               merge_entry_us=pct(us(m[:, 0])), merge_after_wait_us=pct(us(m[:, 1])),
               merge_end_us=pct(us(m[:, 2])),
               programs_per_sm=pct(torch.bincount(s[:, 3].long(), minlength=sms).double()),
               **per_sm(s, t0, sms))
    g_span, gs, gm, g0, g_event, g_marks = stamps(graph.replay)
    gus = lambda col: (col - g0).double() / 1e3  # noqa: E731
    g_tile = gs[:, 1] < (1 << 62)
    row.update(graph_event_us=round(g_event, 2), graph_span_us=round(g_span / 1e3, 2),
               graph_mark_before_us=round(float(gus(g_marks[0])), 2),
               graph_mark_after_us=round(float(gus(g_marks[1])), 2),
               graph_split_first_tile_us=pct(gus(gs[g_tile, 1])), graph_split_end_us=pct(gus(gs[:, 2])),
               graph_merge_entry_us=pct(gus(gm[:, 0])), graph_merge_after_wait_us=pct(gus(gm[:, 1])),
               graph_merge_end_us=pct(gus(gm[:, 2])),
               **{f"graph_{k}": v for k, v in per_sm(gs, g0, sms).items()})
    # mean end per dispatch tier (launch order // (4 * SMs): one program per scheduler each)
    tier = torch.arange(len(s)) // (4 * sms)
    row["tier_mean_end_us"] = [round(float(us(s[tier == k, 2]).mean()), 1) for k in range(int(tier.max()) + 1)]
    raw[shape] = dict(split=s, merge=m, t0=t0, graph_split=gs, graph_merge=gm, graph_t0=g0, graph_marks=g_marks)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="32/4/128/32768/8,32/4/128/131072/8,16/2/256/32768/8,32/4/128/32768/32",
                    help="Hq/Hkv/D/context/batch,...")
    ap.add_argument("--merge", default="", help="merge_split/merge_warps for every launch (int2_decode); "
                    "default: decode_launch_config's")
    ap.add_argument("--repeats", type=int, default=5, help="traced launches per shape (the median run is kept)")
    ap.add_argument("--floor", action="store_true",
                    help="stamp decode_floor.py's launch (the tile's math mostly taken out) instead of the shipped one; "
                         "the rows' untraced event time stays the shipped launch's")
    ap.add_argument("--out", default="decode_timeline.json")
    args = ap.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    max_programs, max_merge = 1 << 16, 1 << 14
    split_buf = torch.empty(max_programs * SLOTS, dtype=torch.int64, device="cuda")
    merge_buf = torch.empty(max_merge * SLOTS, dtype=torch.int64, device="cuda")
    traced = traced_package(split_buf.data_ptr(), merge_buf.data_ptr(), floor=args.floor)
    timer = Timer(graph=True)
    rows, raw = [], {}
    for shape in args.shapes.split(","):
        Hq, Hkv, D, S, B = map(int, shape.split("/"))
        L = SlotLayout(D, 64)
        cache, table, seq = paged_batch(L, [S] * B, 128, Hkv)
        q = torch.randn(B, Hq, D, device="cuda", dtype=torch.bfloat16)
        cfg = untraced.decode_launch_config(B, Hkv, Hq // Hkv, D, sms)
        kw = cfg.kwargs()
        if args.merge:
            kw.update(zip(("merge_split", "merge_warps"), map(int, args.merge.split("/"))))
        rows.append(timeline(shape, cfg, kw, q, cache, table, seq, L, traced, timer, split_buf, merge_buf,
                             args.repeats, sms, raw, floor=args.floor))
        print(json.dumps(rows[-1]), flush=True)
        del cache
    pathlib.Path(args.out).write_text(json.dumps(dict(
        command=" ".join(sys.argv), gpu=torch.cuda.get_device_name(0), torch=torch.__version__,
        rows=rows), indent=1))
    torch.save(raw, str(pathlib.Path(args.out).with_suffix(".pt")))   # the stamps, int64 ns (SLOTS columns)


if __name__ == "__main__":
    main()
