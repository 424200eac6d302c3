#!/usr/bin/env python3
"""Compare e2e_int2.py runs: greedy agreement and first-tokens logprob difference vs a baseline.

  python3 benchmarks/gpu/summarize_e2e.py DIR BASELINE_LABEL [RUN_LABEL=BASELINE ...] > summary.json

Reads the `E2E_RESULT {json}` line and the engine's capacity / int2 start-up lines of each
DIR/e2e_LABEL.log. For every run: per prompt, the number of leading greedy tokens equal to the
baseline's, and the largest |logprob difference| of the chosen tokens over the first 8 positions
where both runs still agree (a broken cache shows up there first).
"""
import json
import re
import sys


def load(d, label):
    text = open(f"{d}/e2e_{label}.log", errors="replace").read()
    res = None
    for line in text.splitlines():
        if line.startswith("E2E_RESULT "):
            res = json.loads(line[len("E2E_RESULT "):])
    m = re.search(r"KV cache size: ([\d,]+) tokens", text)
    return res, (int(m.group(1).replace(",", "")) if m else None), re.findall(r"int2 KV cache active on.*", text)


def compare(run, base):
    agree, lp = [], []
    for ta, tb, la, lb in zip(run["tokens"], base["tokens"], run["logprobs"], base["logprobs"]):
        n = 0
        while n < min(len(ta), len(tb)) and ta[n] == tb[n]:
            n += 1
        agree.append(n)
        k = min(8, n if n else 1)
        lp.append(round(max(abs(x - y) for x, y in zip(la[:k], lb[:k])), 4))
    return dict(greedy_prefix_agreement_tokens=agree, first_tokens_logprob_abs_diff_max=lp,
                max_logprob_diff=max(lp), mean_agreement=round(sum(agree) / len(agree), 2))


def main():
    d, default_base, *pairs = sys.argv[1:]
    out = {"comparisons": [], "kv_tokens": {}, "startup_lines": {}, "runs": {}}
    for p in pairs:
        run, base = (p.split("=") + [default_base])[:2]
        r, kv, lines = load(d, run)
        b, _, _ = load(d, base)
        out["kv_tokens"][run] = kv
        out["startup_lines"][run] = lines[:1]
        if r is None:
            out["runs"][run] = "no E2E_RESULT (see its log)"
            continue
        out["runs"][run] = {k: r.get(k) for k in ("kv", "graph", "tp", "chunk", "blocks", "preemptions", "init_s", "env", "prompt_tokens",
                                                  "repeat_cached_tokens", "repeat_agreement") if k in r}
        if b is not None and run != base:
            out["comparisons"].append(dict(run=run, vs=base, **compare(r, b)))
    json.dump(out, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
