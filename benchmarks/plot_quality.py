#!/usr/bin/env python3
"""docs/quality.svg from benchmarks/results/quality_smollm2.json: perplexity increase vs full
precision per scheme (log scale), full window and late half. Plain SVG, no plotting library."""

import json
import math
import sys

rows_all = json.load(open(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results/quality_smollm2.json"))
out = sys.argv[2] if len(sys.argv) > 2 else "docs/quality.svg"
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
