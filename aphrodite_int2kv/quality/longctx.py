"""Long-context checks that separate KV schemes better than plain needle-in-a-haystack: a needle
among many near-identical distractors, and recall by position among many similar facts. Scored on
the final answer only (the greedy continuation's first number). Items the full-precision model
cannot solve are dropped before schemes are compared (a 135M model has limits)."""

from __future__ import annotations

import argparse
import math
import random

import torch

COLORS = ["red", "blue", "green", "black", "white", "yellow", "brown", "gray", "purple", "orange",
          "pink", "silver", "golden", "violet", "amber", "ivory"]
ANIMALS = ["fox", "owl", "cat", "dog", "wolf", "bear", "hawk", "deer", "frog", "crow", "goat", "mole"]
ORDINALS = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth"]


def needle_items(n: int, lines: int, seed: int = 0):
    """A ledger of `lines` '<color> <animal> keeps number NNNN' facts; ask for one of them."""
    rng = random.Random(seed)
    items = []
    for _ in range(n):
        pairs = rng.sample([(c, a) for c in COLORS for a in ANIMALS], lines)
        facts = [(c, a, rng.randint(1000, 9999)) for c, a in pairs]
        c, a, num = facts[rng.randrange(lines)]
        body = "\n".join(f"The {c} {a} keeps the number {x}." for c, a, x in facts)
        items.append(("needle", f"{body}\n\nQuestion: which number does the {c} {a} keep?\n"
                                f"Answer: The {c} {a} keeps the number", str(num)))
    return items


def position_items(n: int, keys: int, filler: int, seed: int = 1):
    """Several 'The <ordinal> code is NNNN.' facts spread through filler text; ask by position."""
    rng = random.Random(seed)
    pad = ("The river ran past the mill and the town woke slowly under a grey sky. " * filler).strip()
    items = []
    for _ in range(n):
        codes = [rng.randint(1000, 9999) for _ in range(keys)]
        text = "\n".join(f"{pad}\nThe {ORDINALS[i]} code is {codes[i]}." for i in range(keys))
        i = rng.randrange(keys)
        items.append(("position", f"{text}\n\nQuestion: what is the {ORDINALS[i]} code?\n"
                                  f"Answer: The {ORDINALS[i]} code is", str(codes[i])))
    return items


def order_items(n: int, keys: int, filler: int, seed: int = 2):
    """Several 'The visitor was the <color> <animal>.' facts spread through filler text; ask for
    all of them in the order they appeared (scored as the whole list, in order)."""
    rng = random.Random(seed)
    pad = ("The bell rang twice and the road stayed empty until the evening train came in. " * filler).strip()
    items = []
    for _ in range(n):
        animals = rng.sample(ANIMALS, keys)
        text = "\n".join(f"{pad}\nThe next visitor was the {a}." for a in animals)
        items.append(("order", f"{text}\n\nQuestion: list the visitors in the order they came.\n"
                               f"Answer: The visitors were the", ", ".join(animals)))
    return items


# --- The long-context suite (`aphrodite-int2kv longctx`): teacher-forced, one forward per item ---
#
# Every item is one token sequence and the positions it is scored on. A greedy answer equals the
# truth's tokens exactly when every one of them is the argmax under teacher forcing, so one
# forward scores a recall item as greedy decoding would (a different tokenization of the same
# text aside).

PASSKEY = "The pass key is {key}. Remember it. {key} is the pass key."
# the filler of the usual pass-key test: repetitive, so that the key is the one thing to recall
PASSKEY_FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "


def text_ids(tok, name: str) -> list[int]:
    from aphrodite_int2kv.quality import assets

    with open(assets.text_path(name), encoding="utf-8") as f:
        return tok.encode(f.read()).ids


def copy_items(ids: list[int], distances, passages: int = 2, length: int = 256, lead: int = 256,
               skip: int = 8, passage_start: int = 200_000, filler_start: int = 20_000):
    """A passage P of `length` tokens, then other text, then P again, its second copy starting
    `distance` tokens after the first; scored on the second copy's tokens skip..length-1 (the
    first few need a moment to be recognised as a copy). Passages and filler come from regions of
    the text disjoint from each other and from `eval`'s windows. -> [(label, ids, rows, targets)]"""
    items = []
    for p in range(passages):
        a = passage_start + p * 4 * length
        passage = ids[a:a + length]
        for d in distances:
            if d < length:
                raise ValueError(f"copy test: distance {d} is shorter than the passage ({length} tokens)")
            f0 = filler_start + p * 8192
            seq = ids[f0:f0 + lead] + passage + ids[f0 + lead:f0 + lead + d - length] + passage
            second = lead + d
            targets = torch.arange(second + skip, second + length)
            items.append((f"copy@{d}", torch.tensor(seq), targets - 1, torch.tensor(seq)[targets]))
    return items


def passkey_items(tok, context: int, depths, seed: int = 3):
    """A 5-digit pass key stated once at `depth` (fraction of the context) inside repeated filler,
    asked for at the end. Scored on the answer's tokens."""
    rng = random.Random(seed)
    unit = tok.encode(PASSKEY_FILLER).ids
    ids = unit * (2 * context // len(unit) + 2)
    items = []
    for i, depth in enumerate(depths):
        key = rng.randint(10000, 99999)
        needle = tok.encode(" " + PASSKEY.format(key=key) + " ").ids
        question = tok.encode("\n\nWhat is the pass key? The pass key is").ids
        answer = tok.encode(f" {key}").ids
        if not tok.decode(answer[:1]).strip():   # a lone space token: part of the question, not the answer
            question, answer = question + answer[:1], answer[1:]
        n = context - len(needle) - len(question) - len(answer)
        at = int(n * depth) // len(unit) * len(unit)      # on a sentence boundary
        seq = ids[:at] + needle + ids[at:n] + question + answer
        targets = torch.arange(len(seq) - len(answer), len(seq))
        items.append((f"passkey{context}@{depth:.2f}", torch.tensor(seq), targets - 1, torch.tensor(seq)[targets]))
    return items


def far_windows(ids: list[int], name: str, tokens: int, count: int, start: int):
    """`count` windows of `tokens` tokens; scored on positions tokens/2 .. tokens-1, which sit at
    least tokens/2 from the window's start (far from any recent window for most of their cache)."""
    items = []
    for w in range(count):
        a = start + w * tokens
        if a + tokens > len(ids):
            raise ValueError(f"far perplexity: {name} has {len(ids)} tokens, too few for {count} windows of "
                             f"{tokens} from {start}")
        seq = torch.tensor(ids[a:a + tokens])
        targets = torch.arange(tokens // 2, tokens)
        items.append((f"far@{tokens}:{name}", seq, targets - 1, seq[targets]))
    return items


def score_items(model, items, attention, reference=None, progress=None):
    """-> one dict per item: top-1 hits, NLL sum, all-correct flag, and (given the full-precision
    log-probs of the same item in `reference`) the KL from full precision; also the log-probs, kept
    for later rows to compare against. `model`: smollm.harness_model's."""
    out = []
    for i, (label, seq, rows, targets) in enumerate(items):
        if progress:
            progress(i, label)
        logp = model.forward(seq, attention, rows=rows).log_softmax(-1)
        r = dict(label=label, n=len(targets), top1=int((logp.argmax(-1) == targets).sum()),
                 nll=float(-logp.gather(1, targets[:, None]).sum()),
                 exact=bool((logp.argmax(-1) == targets).all()))
        if reference is not None:
            ref = reference[i]["logp"].float()
            r["kl"] = float((ref.exp() * (ref - logp)).sum())
        r["logp"] = logp.half()
        out.append(r)
    return out


def add_suite_arguments(p) -> None:
    """The suite's flags, shared by `longctx` (the harness) and `eval --engine --suite` (the engine)."""
    p.add_argument("--distances", default="1024,3072,6144", help="copy test: tokens between the two copies")
    p.add_argument("--passages", type=int, default=2, help="copy test: passages per distance")
    p.add_argument("--far", default="4096:moby-dick,4096:sotu,8192:moby-dick",
                   help="far perplexity windows as TOKENS:TEXT, scored on their second half")
    p.add_argument("--passkeys", default="4096:0.1,0.3,0.5,0.7,0.9",
                   help="pass keys as CONTEXT:DEPTH,DEPTH,... (several contexts separated by '/'); empty = none")
    p.add_argument("--quick", action="store_true",
                   help="a smaller suite for comparing schemes on a CPU (copy at 1K and 3K, one passage, one far "
                        "window, one pass key), in place of the four flags above")


QUICK = dict(distances="1024,3072", passages=1, far="4096:moby-dick", passkeys="4096:0.5")


def suite_flags(args) -> dict:
    """The parsed flags as suite_items' arguments (`--quick`: QUICK's, about 2 minutes a row on
    two CPU cores instead of 10)."""
    if getattr(args, "quick", False):
        args = argparse.Namespace(**QUICK)
    return dict(distances=[int(d) for d in args.distances.split(",") if d], passages=args.passages,
                far=list(filter(None, args.far.split(","))), passkeys=list(filter(None, args.passkeys.split("/"))))


def suite_items(tok, distances, passages: int, far: list[str], passkeys: list[str]):
    """The suite's items: copy tests at `distances`, far windows as 'TOKENS:TEXT', pass keys as
    'CONTEXT:DEPTH,DEPTH,...' (the `longctx` command's flags)."""
    texts = {}

    def ids(name):
        if name not in texts:
            texts[name] = text_ids(tok, name)
        return texts[name]

    items = copy_items(ids("moby-dick"), distances, passages) if distances else []
    for spec in far:
        n, name = spec.split(":")
        items += far_windows(ids(name), name, int(n), 1, start=len(ids(name)) // 3)
    for spec in passkeys:
        context, depths = spec.split(":")
        items += passkey_items(tok, int(context), [float(x) for x in depths.split(",")])
    return items


def summarize(scheme_rows, ref_rows):
    """Per task (copy@D, far@N:TEXT, passkeyN): top-1 and NLL on the copy, perplexity and its
    increase over the reference (and KL where measured) far away, pass keys right where the
    reference is right. Rows as `score_items` returns them, the same items in the same order."""
    out = {}
    for r, f in zip(scheme_rows, ref_rows):
        task = r["label"].split("@")[0] if r["label"].startswith("passkey") else r["label"]
        a = out.setdefault(task, dict(n=0, top1=0, nll=0.0, fp_nll=0.0, kl=0.0, items=0, fp_right=0, right=0))
        a["n"] += r["n"]
        a["top1"] += r["top1"]
        a["nll"] += r["nll"]
        a["fp_nll"] += f["nll"]
        a["kl"] += r.get("kl", 0.0)
        a["items"] += 1
        a["fp_right"] += f["exact"]
        a["right"] += f["exact"] and r["exact"]
    res = {}
    for task, a in out.items():
        if task.startswith("copy"):
            res[task] = dict(top1=a["top1"] / a["n"], nll=a["nll"] / a["n"], tokens=a["n"])
        elif task.startswith("far"):
            res[task] = dict(ppl=math.exp(a["nll"] / a["n"]), rel=math.exp((a["nll"] - a["fp_nll"]) / a["n"]) - 1,
                             kl=a["kl"] / a["n"], tokens=a["n"])
        else:
            res[task] = dict(right=a["right"], fp_right=a["fp_right"], items=a["items"])
    return res
