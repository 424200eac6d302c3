#!/usr/bin/env python3
"""docs/capacity.svg from benchmarks/results/kv_capacity_h200.json: the engine-reported KV capacity
(GPU KV cache tokens at the benchmark's max_model_len) of each KV dtype as a multiple of bf16's on
the same model, context and GPU share. Plain SVG, no plotting library.

  python3 benchmarks/plot_capacity.py [kv_capacity_h200.json] [docs/capacity.svg]
"""

import json
import sys

rows = json.load(open(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results/kv_capacity_h200.json"))
out = sys.argv[2] if len(sys.argv) > 2 else "docs/capacity.svg"

# (label, model prefix, max_model_len, kv dtype, a substring of the row's note that picks it)
BARS = [
    ("dense8b 32K: fp8", "dense8b", 32848, "fp8", ""),
    ("dense8b 32K: int2, paged window (shipped)", "dense8b", 32848, "int2", "shipped defaults of session 5"),
    ("hybrid27b 32K: fp8", "hybrid27b", 32848, "fp8", ""),
    ("hybrid27b 32K: int2, paged window (session 7)", "hybrid27b", 32848, "int2", "session 7"),
    ("hybrid27b 32K: int2, ring window (shipped)", "hybrid27b", 32848, "int2", "session 10"),
    ("hybrid27b 128K: int2, paged window (session 5)", "hybrid27b", 131152, "int2", "shipped defaults of session 5"),
]


def pick(model, ctx, kv, note):
    found = [r for r in rows if r["model"].startswith(model) and r.get("max_model_len") == ctx
             and r["kv_cache_dtype"] == kv and note in (r.get("note") or "")]
    if not found:
        raise SystemExit(f"no row for {model} {ctx} {kv} {note!r}")
    return found[0]   # the first measurement of that configuration


bars = []
for label, model, ctx, kv, note in BARS:
    ratio = pick(model, ctx, kv, note)["kv_tokens"] / pick(model, ctx, "auto", "")["kv_tokens"]
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
