#!/usr/bin/env python3
"""docs/decode.svg from benchmarks/results/decode_attention_h200.json: int2 decode speedup over the
fastest bf16 kernel (and over aphrodite's own bf16 Triton decode) by batch, one panel per
head_dim x context. Plain SVG, no plotting library."""

import json
import sys

rows = json.load(open(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results/decode_attention_h200.json"))
out = sys.argv[2] if len(sys.argv) > 2 else "docs/decode.svg"
panels = [(d, s) for d in (128, 256) for s in (4096, 32768, 131072)]
batches = [1, 8, 32, 64]
# the session-8 table has G = 64 only (the engine's default at head_dim >= 128); older tables had G = 32 too
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
