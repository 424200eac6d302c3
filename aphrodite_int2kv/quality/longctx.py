"""Long-context checks that separate KV schemes better than plain needle-in-a-haystack: a needle
among many near-identical distractors, and recall by position among many similar facts. Scored on
the final answer only (the greedy continuation's first number). Items the full-precision model
cannot solve are dropped before schemes are compared (a 135M model has limits)."""

from __future__ import annotations

import random
import re

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


@torch.no_grad()
def answer(cfg, sd, tok, prompt: str, attention, max_new: int = 6) -> str:
    from aphrodite_int2kv.quality import smollm

    ids = tok.encode(prompt).ids
    out = []
    for _ in range(max_new):          # full recompute per token: simple, and the same for every scheme
        logits = smollm.forward(cfg, sd, torch.tensor(ids + out), attention)
        out.append(int(logits[-1].argmax()))
    m = re.search(r"\d+", tok.decode(out))
    return m.group(0) if m else ""
