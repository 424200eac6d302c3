#!/usr/bin/env python3
"""The SASS instructions with the most warp-stall samples in an Nsight Compute source-page CSV
(`ncu -i REPORT --page source --csv --print-source sass > FILE.csv`), with their share of all
samples: whether a kernel's stalls sit in a few places or are spread over the loop.

  python3 benchmarks/ncu_hotspots.py benchmarks/results/session9/ncu_onepage_sass.csv [TOP]
"""
import csv
import sys

COL = "Warp Stall Sampling (All Samples)"


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    rows = list(csv.reader(open(sys.argv[1])))
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    head = next(i for i, r in enumerate(rows) if COL in r)
    col, src = rows[head].index(COL), rows[head].index("Source")
    data = [r for r in rows[head + 1:] if len(r) > col]
    total = sum(number(r[col]) for r in data)
    print(f"{len(data)} instructions, {total:.0f} stall samples")
    for r in sorted(data, key=lambda r: -number(r[col]))[:top]:
        print(f"{100 * number(r[col]) / total:5.1f} %  {r[src].strip()[:70]}")


if __name__ == "__main__":
    main()
