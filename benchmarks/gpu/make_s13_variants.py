#!/usr/bin/env python3
"""Rebuild session 13's A/B packages under .ab/ (decode_ab.py --baseline-path .ab --alt-modules ...):
each is `git archive COMMIT aphrodite_int2kv` renamed to int2kv_NAME, with the variant's edit.

  python3 benchmarks/gpu/make_s13_variants.py [NAME ...]      (default: all)

Calls 1-2 and 4 ran on uncommitted trees (benchmarks/results/README.md); their variants are
rebuilt here on the nearest commit (5321a3b), so the figures of those calls can be rerun in kind,
not byte for byte. base = d82f783 (session 12), deal = 5321a3b, even = b1b2fb8 at 12 per SM.
"""
import pathlib
import shutil
import subprocess
import sys
import tarfile
import io

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEC = "kernels/decode.py"
# name: (commit, [(file, old, new), ...])
VARIANTS = {
    "base": ("d82f783", []),
    "deal": ("5321a3b", []),
    "even": ("b1b2fb8", [(DEC, "        return 24 if fold and block_h <= 8 else 16",
                          "        return 12 if fold and block_h <= 8 else 16")]),
    "nopdl": ("5321a3b", [(DEC, "    pdl = not interpreting() and q_rot.is_cuda and \\",
                           "    pdl = False and q_rot.is_cuda and \\")]),
    "half": ("5321a3b", [(DEC, "part_out = torch.empty(Hq * num_slots * D, dtype=torch.float32",
                          "part_out = torch.empty(Hq * num_slots * D, dtype=torch.bfloat16")]),
    "nochain": ("5321a3b", [
        (DEC, "PDL=pdl, AFTER_TAIL=pdl and bool(tail_programs), **heads,", "PDL=pdl, AFTER_TAIL=False, **heads,"),
        (DEC, '**({"launch_pdl": True} if pdl and tail_programs else {}))', "**({}))"),
        (DEC, "WBS=window[0].shape[1] if window else 16, PDL=pdl, **heads,",
         "WBS=window[0].shape[1] if window else 16, PDL=False, **heads,")]),
    "waitstart": ("5321a3b", [
        (DEC, "    if AFTER_TAIL:\n        # launched while the tail launch runs (its programs overlap this launch's start): this\n"
              "        # launch completes after it, so the merge, which waits for this launch, waits for both\n"
              "        gdc_wait()\n", ""),
        (DEC, "        gdc_launch_dependents()\n    program = tl.program_id(0)\n",
         "        gdc_launch_dependents()\n    if AFTER_TAIL:\n        gdc_wait()\n    program = tl.program_id(0)\n")]),
    "b1wave": ("5321a3b", [(DEC, "    splits = max(1, min(splits, 256))", "    splits = max(1, min(splits, 1024))")]),
    "noloop": ("5321a3b", [(DEC, "    while first < t1:", "    if first < t1:   # diagnostic: uniform batches only")]),
}


def build(name: str) -> None:
    commit, edits = VARIANTS[name]
    pkg = f"int2kv_{name}"
    out = ROOT / ".ab" / pkg
    shutil.rmtree(out, ignore_errors=True)
    data = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "aphrodite_int2kv"], check=True,
                          capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for m in tar.getmembers():
            if m.isfile():
                rel = pathlib.Path(m.name).relative_to("aphrodite_int2kv")
                text = tar.extractfile(m).read().decode()
                for f, old, new in edits:
                    if str(rel) == f:
                        assert text.count(old) == 1, f"{name}: edit not found once in {f}: {old[:60]!r}"
                        text = text.replace(old, new)
                dst = out / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_text(text.replace("aphrodite_int2kv", pkg))
    print(f"{out} ({commit}{', edited' if edits else ''})")


if __name__ == "__main__":
    for n in sys.argv[1:] or VARIANTS:
        build(n)
