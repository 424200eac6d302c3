#!/usr/bin/env python3
"""The plots in docs/, as plain SVG (no plotting library), from the result files.

  python3 benchmarks/plots.py {capacity,decode,quality,engine,gqa,dtypes,longctx,all} [--src FILE] [--out FILE]

capacity: docs/capacity.svg from benchmarks/results/kv_capacity_h200.json: the engine-reported KV capacity (GPU KV cache tokens at the benchmark's max_model_len) of each KV dtype as a multiple of bf16's on the same model, context and GPU share. Plain SVG, no plotting library.
decode: docs/decode.svg from benchmarks/results/decode_attention_h200.json: int2 decode speedup over the fastest bf16 kernel (and over aphrodite's own bf16 Triton decode) by batch, one panel per head_dim x context. Plain SVG, no plotting library.
gqa: docs/decode_gqa.svg from benchmarks/results/decode_gqa_d{128,256}_h200.json (--src with {D}): int2 decode speedup over the fastest bf16 by query-to-KV-head ratio and KV-head count.
dtypes: docs/dtypes.svg from benchmarks/results/engine_dtypes_smollm2_cpu.json and dtype_capacity_cpu.json: each engine KV dtype and int2 as a point, capacity vs bf16 (the engine's arithmetic, 8B-shaped, 32K) against the late-half perplexity increase on SmolLM2 / Moby-Dick (the CPU harness).
longctx: docs/longctx.svg from benchmarks/results/longctx/longctx_decision_h100.json: each KV scheme as a point, capacity vs bf16 (bits per element at head_dim 128 and 32K, the window counted) against the copy test's top-1 at 3K tokens (SmolLM2, the harness).
quality: docs/quality.svg from benchmarks/results/quality_smollm2.json: perplexity increase vs full precision per scheme (log scale), full window and late half. Plain SVG, no plotting library.
"""

import argparse
import json
import math


def plot_capacity(src, out):
    """docs/capacity.svg from benchmarks/results/kv_capacity_h200.json: the engine-reported KV ca..."""
    rows = json.load(open(src))

    # (label, model prefix, max_model_len, kv dtype, the row's variant)
    BARS = [
        ("dense8b 32K: fp8", "dense8b", 32848, "fp8", "fp8"),
        ("dense8b 32K: int2 (defaults)", "dense8b", 32848, "int2", "int2 defaults"),
        ("hybrid27b 32K: fp8", "hybrid27b", 32848, "fp8", "fp8"),
        ("hybrid27b 32K: int2, paged window", "hybrid27b", 32848, "int2", "int2, paged window"),
        ("hybrid27b 32K: int2, ring window (defaults)", "hybrid27b", 32848, "int2", "int2 defaults"),
        ("hybrid27b 128K: int2 (defaults)", "hybrid27b", 131152, "int2", "int2 defaults"),
    ]

    def pick(model, ctx, kv, variant):
        found = [r for r in rows if r["model"].startswith(model) and r.get("max_model_len") == ctx
                 and r["kv_cache_dtype"] == kv and r["variant"] == variant]
        if len(found) != 1:
            raise SystemExit(f"{len(found)} rows for {model} {ctx} {kv} {variant!r}")
        return found[0]

    bars = []
    for label, model, ctx, kv, note in BARS:
        ratio = pick(model, ctx, kv, note)["kv_tokens"] / pick(model, ctx, "auto", "bf16")["kv_tokens"]
        bars.append((label, ratio))

    left, top, bar_h, gap, width = 330, 50, 22, 10, 420
    xmax = 7.0
    H = top + len(bars) * (bar_h + gap) + 40
    W = left + width + 80


    def x(v):
        return left + v / xmax * width


    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           '<text x="10" y="20" font-size="14">KV capacity on one H200 (aphrodite 0.21.0, engine-reported tokens), '
           'as a multiple of bf16\'s</text>',
           f'<line x1="{x(5):.1f}" x2="{x(5):.1f}" y1="{top - 8}" y2="{H - 30}" stroke="#555" stroke-dasharray="4,3"/>',
           f'<text x="{x(5) - 18:.1f}" y="{top - 12}">5x goal</text>']
    for i, (label, ratio) in enumerate(bars):
        y0 = top + i * (bar_h + gap)
        color = "#3b6ea5" if "int2" in label else "#999"
        svg.append(f'<text x="{left - 8}" y="{y0 + 15}" text-anchor="end">{label}</text>')
        svg.append(f'<rect x="{left}" y="{y0}" width="{x(ratio) - left:.1f}" height="{bar_h}" fill="{color}"/>')
        svg.append(f'<text x="{x(ratio) + 5:.1f}" y="{y0 + 15}">{ratio:.2f}x</text>')
    for v in range(0, int(xmax) + 1):
        svg.append(f'<text x="{x(v) - 4:.1f}" y="{H - 14}">{v}x</text>')
    svg.append("</svg>")
    open(out, "w").write("\n".join(svg) + "\n")
    for label, ratio in bars:
        print(f"{ratio:5.2f}x  {label}")


def plot_decode(src, out):
    """docs/decode.svg from benchmarks/results/decode_attention_h200.json: int2 decode speedup ov..."""
    rows = json.load(open(src))
    panels = [(d, s) for d in (128, 256) for s in (4096, 32768, 131072)]
    batches = [1, 8, 32, 64]
    # the table has G = 64 only (the engine's default at head_dim >= 128)
    series = [("int2 (G64) vs fastest bf16", 64, None, "#3b6ea5"),
              ("int2 (G64) vs aphrodite Triton bf16", 64, "aphrodite-triton", "#e08a2c")]
    PW, PH, top, left = 300, 210, 60, 50
    W, H = left + 3 * (PW + 20), top + 2 * (PH + 50) + 20
    ymax = 6.0


    def y(v, y0):
        return y0 + PH - min(v, ymax) / ymax * PH


    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
           '<text x="10" y="18" font-size="14">int2 split-KV decode on one H200: speedup over bf16 (GQA 8:1; '
           f'{rows[0].get("int2_tile", "per-code")} tile, block {rows[0].get("block_size", 16)}, engine launch config)</text>']
    for i, (name, _, _, color) in enumerate(series):
        svg.append(f'<rect x="{10 + i * 230}" y="28" width="10" height="10" fill="{color}"/>'
                   f'<text x="{25 + i * 230}" y="37">{name}</text>')
    svg.append('<text x="700" y="37">dashed: 1x and the 3x goal</text>')
    for p, (D, S) in enumerate(panels):
        x0 = left + (p % 3) * (PW + 20)
        y0 = top + (p // 3) * (PH + 50)
        svg.append(f'<text x="{x0}" y="{y0 - 6}">head_dim {D}, context {S // 1024}K</text>')
        svg.append(f'<rect x="{x0}" y="{y0}" width="{PW}" height="{PH}" fill="none" stroke="#999"/>')
        for v in (1, 3):
            svg.append(f'<line x1="{x0}" x2="{x0 + PW}" y1="{y(v, y0):.1f}" y2="{y(v, y0):.1f}" stroke="#555" '
                       f'stroke-dasharray="4,3"/><text x="{x0 - 22}" y="{y(v, y0) + 4:.1f}">{v}x</text>')
        slot = PW / len(batches)
        bw = slot / (len(series) + 1)
        for bi, B in enumerate(batches):
            svg.append(f'<text x="{x0 + bi * slot + slot / 2 - 12:.1f}" y="{y0 + PH + 14}">B={B}</text>')
            for si, (_, G, kernel, color) in enumerate(series):
                r = next((r for r in rows if r["head_dim"] == D and r["context_len"] == S and r["batch"] == B
                          and r["group_size"] == G), None)
                if r is None:
                    continue
                base = r["bf16_all_us"].get(kernel) if kernel else r["bf16_us"]
                if not base:
                    continue
                v = base / r["int2_us"]
                bx = x0 + bi * slot + (si + 0.5) * bw
                svg.append(f'<rect x="{bx:.1f}" y="{y(v, y0):.1f}" width="{bw - 1:.1f}" '
                           f'height="{y0 + PH - y(v, y0):.1f}" fill="{color}"><title>{v:.2f}x</title></rect>')
    svg.append("</svg>")
    open(out, "w").write("\n".join(svg))
    print("wrote", out)


def plot_quality(src, out):
    """docs/quality.svg from benchmarks/results/quality_smollm2.json: perplexity increase vs full..."""
    rows_all = json.load(open(src))
    keep = ["naive 2-bit per token", "int2 no-rotation G32", "int2 hadamard G64", "int2 hadamard G32",
            "int2 hadamard G32 clip0.9", "int2 hadamard G32 lloyd-max", "int2 calibrated G32 sink0 recent0 K-offset",
            "kivi 2-bit", "int2 hadamard G32 + sink4 + recent128", "kivi 2-bit + recent 128",
            "int2 hadamard G32 + sink4 + recent128 + K-center", "int2 calibrated G32 sink4 recent128 K-offset",
            "int4 hadamard G32", "fp8 e4m3 per-head"]
    by = {r["scheme"]: r for r in rows_all if r["text"] == "moby-dick"}
    rows = [by[k] for k in keep if k in by]
    W, left, bar, gap = 960, 390, 11, 8
    H = 60 + len(rows) * (2 * bar + gap)
    lo, hi = math.log10(0.3), math.log10(3000)   # percent axis


    def x(pct):
        return left + (math.log10(max(pct, 0.3)) - lo) / (hi - lo) * (W - left - 30)


    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           '<text x="10" y="20" font-size="14">SmolLM2-135M, Moby-Dick, 4 x 1024 tokens: perplexity increase vs full-precision KV (log scale)</text>',
           f'<rect x="{left}" y="30" width="10" height="10" fill="#3b6ea5"/><text x="{left + 15}" y="39">full window</text>',
           f'<rect x="{left + 110}" y="30" width="10" height="10" fill="#e08a2c"/><text x="{left + 125}" y="39">late half (positions 512-1023)</text>']
    for tick in (1, 10, 100, 1000):
        svg.append(f'<line x1="{x(tick):.1f}" y1="48" x2="{x(tick):.1f}" y2="{H - 5}" stroke="#ccc"/>'
                   f'<text x="{x(tick) + 2:.1f}" y="{H - 8}" fill="#666">{tick}%</text>')
    y = 55
    for r in rows:
        svg.append(f'<text x="{left - 6}" y="{y + bar + 4}" text-anchor="end">{r["scheme"]} ({r["bits_per_element"]:.2f} b)</text>')
        for i, (key, color) in enumerate((("rel_increase", "#3b6ea5"), ("late_rel_increase", "#e08a2c"))):
            pct = 100 * r[key]
            svg.append(f'<rect x="{left}" y="{y + i * bar}" width="{max(1, x(pct) - left):.1f}" height="{bar - 1}" fill="{color}"/>'
                       f'<text x="{x(pct) + 3:.1f}" y="{y + i * bar + bar - 2}" font-size="10">{pct:+.1f}%</text>')
        y += 2 * bar + gap
    svg.append("</svg>")
    open(out, "w").write("\n".join(svg))
    print(f"wrote {out} ({len(rows)} schemes)")


def plot_engine(src, out):
    """docs/quality_engine.svg from benchmarks/results/engine_eval_smollm2_h200.json: per KV dtype in the
    engine, the perplexity increase over bf16 (whole windows and late half) and the share of
    long-context answers equal to bf16's."""
    rows = [r for r in json.load(open(src))["rows"] if not r.get("error") and r["kv"] != "bf16"]
    left, top, bar_h, gap, width = 150, 60, 14, 18, 360
    H = top + len(rows) * (3 * bar_h + gap) + 40
    W = left + width + 200
    xmax = max(15.0, max(100 * r["ppl_late_delta"] for r in rows) * 1.1)

    def x(v):
        return left + v / xmax * width

    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           '<text x="10" y="20" font-size="14">SmolLM2-135M in aphrodite 0.21.0 on an H200, against bf16 in the same engine</text>',
           '<text x="10" y="38" fill="#3b6ea5">perplexity increase, whole windows</text>'
           '<text x="230" y="38" fill="#8fb3da">late half</text>'
           '<text x="310" y="38" fill="#999">long-context answers equal to bf16\'s (full width = 100 %)</text>']
    for i, r in enumerate(rows):
        y0 = top + i * (3 * bar_h + gap)
        svg.append(f'<text x="{left - 8}" y="{y0 + 2 * bar_h}" text-anchor="end">{r["kv"]}</text>')
        for j, (v, color, label) in enumerate(((100 * r["ppl_delta"], "#3b6ea5", "%+.1f %%"),
                                               (100 * r["ppl_late_delta"], "#8fb3da", "%+.1f %%"),
                                               (r["answers_equal_bf16"] * xmax, "#999", None))):
            yy = y0 + j * bar_h
            svg.append(f'<rect x="{left}" y="{yy}" width="{max(0.5, x(v) - left):.1f}" height="{bar_h - 2}" fill="{color}"/>')
            text = label % v if label else f"{100 * r['answers_equal_bf16']:.0f} %"
            svg.append(f'<text x="{x(v) + 4:.1f}" y="{yy + bar_h - 3}">{text}</text>')
    svg.append("</svg>")
    open(out, "w").write("\n".join(svg) + "\n")


def plot_gqa(src, out):
    """docs/decode_gqa.svg from benchmarks/results/decode_gqa_d{128,256}_h200.json: the int2 decode's
    speedup over the fastest bf16 kernel by query-to-KV-head ratio, one line per KV-head count, the
    lowest of 32K / 128K x batch 8 / 32, one panel per head_dim. Plain SVG, no plotting library."""
    panels = []
    for D in (128, 256):
        rows = json.load(open(src.replace("{D}", str(D))))
        gpu = rows[0]["env"]["gpu"].replace("NVIDIA ", "").split()[0]     # the GPU the rows name
        worst = {}
        for r in rows:
            key = (r["num_q_heads"] // r["num_kv_heads"], r["num_kv_heads"])
            worst[key] = min(worst.get(key, 99.0), r["speedup"])
        panels.append((D, worst))
    ratios = sorted({k[0] for _, w in panels for k in w if k[0] <= 32})
    colors = {1: "#3b6ea5", 2: "#e08a2c", 4: "#4a9a4a", 8: "#a04aa0"}
    PW, PH, top, left = 380, 230, 60, 50
    W, H = left + 2 * (PW + 30), top + PH + 60
    ymax = 5.0

    def y(v):
        return top + PH - min(v, ymax) / ymax * PH

    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
           f'<text x="10" y="18" font-size="14">int2 decode on one {gpu} vs the fastest bf16, by query heads per KV head '
           '(lowest of 32K/128K x batch 8/32)</text>']
    for i, (h, c) in enumerate(colors.items()):
        svg.append(f'<rect x="{10 + i * 110}" y="28" width="10" height="10" fill="{c}"/>'
                   f'<text x="{25 + i * 110}" y="37">{h} KV head{"s" if h > 1 else ""}</text>')
    for p, (D, worst) in enumerate(panels):
        x0 = left + p * (PW + 30)
        svg.append(f'<text x="{x0}" y="{top - 6}">head_dim {D}</text>')
        svg.append(f'<rect x="{x0}" y="{top}" width="{PW}" height="{PH}" fill="none" stroke="#999"/>')
        for v in (1, 3):
            svg.append(f'<line x1="{x0}" x2="{x0 + PW}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#555" '
                       f'stroke-dasharray="4,3"/><text x="{x0 - 22}" y="{y(v) + 4:.1f}">{v}x</text>')

        def x(i):
            return x0 + (i + 0.5) * PW / len(ratios)

        for i, r in enumerate(ratios):
            svg.append(f'<text x="{x(i) - 6:.1f}" y="{top + PH + 14}">{r}</text>')
        svg.append(f'<text x="{x0 + PW / 2 - 60:.1f}" y="{top + PH + 30}">query heads per KV head</text>')
        for h, c in colors.items():
            pts = [(x(i), y(worst[(r, h)])) for i, r in enumerate(ratios) if (r, h) in worst]
            svg.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>'
                       % (c, " ".join(f"{a:.1f},{b:.1f}" for a, b in pts)))
            for (a, b), r in zip(pts, [r for r in ratios if (r, h) in worst]):
                svg.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="2.5" fill="{c}"><title>ratio {r}, {h} KV: '
                           f'{worst[(r, h)]:.2f}x</title></circle>')
    svg.append("</svg>")
    open(out, "w").write("\n".join(svg) + "\n")


def plot_dtypes(src, out):
    """docs/dtypes.svg: capacity against quality, one point per KV dtype (see the module docstring)."""
    import os

    quality = json.load(open(src))["rows"]
    rows = [r for r in json.load(open(os.path.join(os.path.dirname(src), "dtype_capacity_cpu.json"))) if "kv_tokens" in r]
    bf16 = next(r["kv_tokens"] for r in rows if r["kv_cache_dtype"] == "auto")
    capacity = {r["kv_cache_dtype"]: r["kv_tokens"] / bf16 for r in rows}
    points = [(r["kv_cache_dtype"], capacity.get(r["kv_cache_dtype"]), 100 * r["late_rel_increase"])
              for r in quality if r["text"] == "moby-dick" and r["kv_cache_dtype"] != "auto"]
    points = [p for p in points if p[1]]
    W, H, left, bottom, top = 920, 420, 70, 50, 40
    lo, hi = math.log10(0.3), math.log10(40)

    def x(v):
        return left + (v - 1) / 5.5 * (W - left - 160)

    def y(pct):
        return top + (hi - math.log10(max(pct, 0.3))) / (hi - lo) * (H - top - bottom)

    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           '<text x="10" y="20" font-size="14">KV capacity vs bf16 (engine arithmetic, 8B-shaped, 32K) against '
           'perplexity increase (SmolLM2, Moby-Dick, late half; log scale, floor 0.3 %)</text>']
    for tick in (1, 2, 3, 4, 5, 6):
        svg.append(f'<line x1="{x(tick):.1f}" y1="{top}" x2="{x(tick):.1f}" y2="{H - bottom}" stroke="#ddd"/>'
                   f'<text x="{x(tick) - 8:.1f}" y="{H - bottom + 16}" fill="#666">{tick}x</text>')
    for tick in (0.3, 1, 3, 10, 30):
        svg.append(f'<line x1="{left}" y1="{y(tick):.1f}" x2="{W - 150}" y2="{y(tick):.1f}" stroke="#ddd"/>'
                   f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end" fill="#666">{tick:g}%</text>')
    placed = []     # label boxes (x0, x1, y): a label that would overlap one is moved down a line
    for name, cap, pct in sorted(points, key=lambda p: y(p[2])):
        color = "#c0392b" if name == "int2" else "#3b6ea5"
        label = f"{name} ({pct:+.1f}%, {cap:.2f}x)"
        lx, ly = x(cap) + 8, y(pct) + 4
        while any(abs(ly - py) < 13 and lx < px1 and px0 < lx + 6.2 * len(label) for px0, px1, py in placed):
            ly += 13
        placed.append((lx, lx + 6.2 * len(label), ly))
        svg.append(f'<circle cx="{x(cap):.1f}" cy="{y(pct):.1f}" r="5" fill="{color}"/>'
                   f'<text x="{lx:.1f}" y="{ly:.1f}" font-size="11">{label}</text>')
    svg.append(f'<text x="{(W - 150) / 2:.0f}" y="{H - 10}">more tokens in the same memory &#8594;</text>')
    svg.append("</svg>")
    open(out, "w").write("\n".join(svg) + "\n")


def plot_longctx(src, out):
    """docs/longctx.svg: capacity against copy accuracy far from the window (module docstring)."""
    rows = json.load(open(src))["rows"]
    fp = next(r for r in rows if r["scheme"] == "fp")["tasks"]["copy@3072"]["top1"] * 100
    points = []
    for r in rows:
        if r["scheme"] == "fp":
            continue
        name = r["scheme"].replace(" + sink4 + recent128", "").replace(" v_tiles=True", " V-tiles")
        name = name.replace("engine default: int2 hadamard G32 std-range + recent128 + data-free K-center 16",
                            "int2 today (engine default)").replace("group_size=", "G")
        points.append((name, 16 / r["bits_32k_d128"], 100 * r["tasks"]["copy@3072"]["top1"]))
    points.sort(key=lambda p: (-p[2]))
    W, H, left, bottom, top, plot_w = 1040, 560, 70, 50, 40, 560
    lo, hi = 50, 95

    def x(v):
        return left + (v - 1) / 6 * plot_w

    def y(pct):
        return top + (hi - pct) / (hi - lo) * (H - top - bottom)

    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           '<text x="10" y="20" font-size="14">Copy test at 3K tokens (SmolLM2-135M, top-1 on the repeat) against '
           'capacity vs bf16 (bits at head_dim 128, 32K, window counted)</text>']
    for tick in range(1, 8):
        svg.append(f'<line x1="{x(tick):.1f}" y1="{top}" x2="{x(tick):.1f}" y2="{H - bottom}" stroke="#ddd"/>'
                   f'<text x="{x(tick) - 8:.1f}" y="{H - bottom + 16}" fill="#666">{tick}x</text>')
    for tick in range(lo, hi + 1, 5):
        svg.append(f'<line x1="{left}" y1="{y(tick):.1f}" x2="{x(7):.1f}" y2="{y(tick):.1f}" stroke="#eee"/>'
                   f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end" fill="#666">{tick}%</text>')
    for level, label in ((fp, "fp"), (fp - 3, "fp - 3")):
        svg.append(f'<line x1="{left}" y1="{y(level):.1f}" x2="{x(7):.1f}" y2="{y(level):.1f}" stroke="#555" '
                   f'stroke-dasharray="4,3"/><text x="{x(7) - 40:.1f}" y="{y(level) - 3:.1f}" fill="#555">{label}</text>')
    svg.append(f'<line x1="{x(5):.1f}" y1="{top}" x2="{x(5):.1f}" y2="{H - bottom}" stroke="#555" stroke-dasharray="4,3"/>'
               f'<text x="{x(5) + 4:.1f}" y="{H - bottom - 6}" fill="#555">5x</text>')
    for i, (name, cap, pct) in enumerate(points, 1):
        color = "#c0392b" if "today" in name else "#3b6ea5" if name.startswith("tiles") else "#777"
        svg.append(f'<circle cx="{x(cap):.1f}" cy="{y(pct):.1f}" r="4" fill="{color}"/>'
                   f'<text x="{x(cap) + 5:.1f}" y="{y(pct) - 4:.1f}" font-size="9">{i}</text>'
                   f'<text x="{x(7) + 20:.1f}" y="{top + 4 + 24 * (i - 1) * (H - top - bottom) / (24 * len(points)):.1f}" '
                   f'font-size="10" fill="{color}">{i}. {name}: {pct:.1f}%, {cap:.2f}x</text>')
    svg.append(f'<text x="{left + plot_w / 2 - 80:.0f}" y="{H - 10}">more tokens in the same memory &#8594;</text>')
    svg.append("</svg>")
    open(out, "w").write("\n".join(svg) + "\n")


PLOTS = {"longctx": (plot_longctx, "benchmarks/results/longctx/longctx_decision_h100.json", "docs/longctx.svg"),
         "dtypes": (plot_dtypes, "benchmarks/results/engine_dtypes_smollm2_cpu.json", "docs/dtypes.svg"), "capacity": (plot_capacity, "benchmarks/results/kv_capacity_h200.json", "docs/capacity.svg"), "decode": (plot_decode, "benchmarks/results/decode_attention_h200.json", "docs/decode.svg"), "quality": (plot_quality, "benchmarks/results/quality_smollm2.json", "docs/quality.svg"), "engine": (plot_engine, "benchmarks/results/engine_eval_smollm2_h200.json", "docs/quality_engine.svg"), "gqa": (plot_gqa, "benchmarks/results/decode_gqa_d{D}_h200.json", "docs/decode_gqa.svg")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("plot", choices=[*PLOTS, "all"])
    ap.add_argument("--src", help="the result file (default: the one docs/ cites)")
    ap.add_argument("--out", help="the SVG to write (default: the one in docs/)")
    a = ap.parse_args()
    for name in (PLOTS if a.plot == "all" else [a.plot]):
        fn, src, out = PLOTS[name]
        fn(a.src or src, a.out or out)
        print("wrote", a.out or out)


if __name__ == "__main__":
    main()
