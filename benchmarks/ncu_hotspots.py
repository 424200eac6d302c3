#!/usr/bin/env python3
"""The SASS instructions with the most warp-stall samples in an Nsight Compute source-page CSV
(`ncu -i REPORT --page source --csv --print-source sass > FILE.csv`), with their share of all
samples: whether a kernel's stalls sit in a few places or are spread over the loop.

  python3 benchmarks/ncu_hotspots.py benchmarks/results/session9/ncu_onepage_sass.csv [TOP]

Then the totals over the kernel: stall reasons (the stall_* columns), stall samples and executed
instructions by opcode, and executed instructions grouped by how often each instruction ran (a
loop's body runs once per iteration, a prologue once per program).
"""
import collections
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
    header = rows[head]
    ex = header.index("Instructions Executed")
    reasons = collections.Counter()
    samples, executed, by_count, width = (collections.Counter() for _ in range(4))
    for r in data:
        words = r[src].split()
        op = (words[1] if words[0].startswith("@") else words[0]).split(".")[0]
        samples[op] += number(r[col])
        executed[op] += number(r[ex])
        by_count[number(r[ex])] += number(r[ex])
        width[number(r[ex])] += 1
        for i, name in enumerate(header):
            if name.startswith("stall_"):
                reasons[name] += number(r[i])
    share = lambda c: ", ".join(f"{k} {100 * v / sum(c.values()):.1f} %" for k, v in c.most_common(12))  # noqa: E731
    print("stall reasons:", share(reasons))
    print("stall samples by opcode:", share(samples))
    print("executed by opcode:", share(executed))
    print(f"executed: {sum(executed.values()):.0f} instructions")
    for n, v in by_count.most_common(5):
        print(f"  run {n:.0f} times: {width[n]} instructions, {100 * v / sum(by_count.values()):.1f} % of executed")


if __name__ == "__main__":
    main()
