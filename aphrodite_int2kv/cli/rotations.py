"""``aphrodite-int2kv make-rotation``, ``calibrate`` and ``k-offsets``: rotation files the int2
cache reads (APHRODITE_INT2KV_K_ROTATION / _V_ROTATION; format in docs/format.md)."""

from __future__ import annotations

import json
import os
import sys

from aphrodite_int2kv.int2.format import Int2ConfigError


def add_parsers(sub):
    p = sub.add_parser("make-rotation", help="Hadamard K/V rotation files for a model's config.json")
    p.add_argument("--model", required=True, help="model directory (its config.json)")
    p.add_argument("--out", default=".", help="directory for k_rotation.pt and v_rotation.pt")
    p.set_defaults(func=make_rotation)
    c = sub.add_parser("calibrate", help="fit per-layer, per-KV-head rotations and K offsets (SmolLM2)")
    c.add_argument("--model", default="smollm2", help="only the built-in 'smollm2' for now")
    c.add_argument("--out", default=".", help="directory for k_rotation.pt and v_rotation.pt")
    c.add_argument("--group-size", type=int, default=32)
    c.add_argument("--calib-start", type=int, default=10000, help="first calibration token (Moby-Dick)")
    c.add_argument("--calib-windows", type=int, default=4)
    c.add_argument("--eval-windows", type=int, default=4, help="held-out windows for the comparison")
    c.set_defaults(func=calibrate)
    o = sub.add_parser("k-offsets", help="Hadamard rotation files with static K offsets for any Hugging "
                                         "Face causal LM (turns on K centering in the engine)")
    o.add_argument("--model", required=True, help="model directory or hub id (transformers loads it)")
    o.add_argument("--text", required=True, help="a plain-text file to average keys over")
    o.add_argument("--tokens", type=int, default=8192, help="tokens of the text to use")
    o.add_argument("--window", type=int, default=1024, help="tokens per forward pass")
    o.add_argument("--skip", type=int, default=4,
                   help="first tokens of each window left out (the sinks the engine keeps uncentered)")
    o.add_argument("--device", default="cuda" if _has_cuda() else "cpu")
    o.add_argument("--dtype", default="bfloat16")
    o.add_argument("--out", default=".", help="directory for k_rotation.pt and v_rotation.pt")
    o.set_defaults(func=k_offsets)


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def model_shape(model_dir: str):
    """(head_dim, num_kv_heads, attention layer indices) from config.json (text_config too)."""
    path = os.path.join(model_dir, "config.json")
    if not os.path.isfile(path):
        raise Int2ConfigError(f"{model_dir!r} has no config.json")
    cfg = json.load(open(path))
    cfg = cfg.get("text_config", cfg)
    try:
        heads = cfg["num_attention_heads"]
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
        layers = cfg["num_hidden_layers"]
    except KeyError as exc:
        raise Int2ConfigError(f"{path}: no {exc.args[0]!r}; cannot tell head_dim and layer count") from None
    kinds = cfg.get("layer_types")
    attn = [i for i in range(layers) if not kinds or kinds[i] in ("full_attention", "attention")]
    return int(head_dim), int(cfg.get("num_key_value_heads", heads)), attn


def _write_and_verify(out_dir, k_layers, v_layers, head_dim, num_kv_heads, extra=None):
    from aphrodite_int2kv.int2.rotation import load_rotation_file, save_rotation_file

    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for name, layers, more in (("k_rotation.pt", k_layers, extra), ("v_rotation.pt", v_layers, None)):
        path = os.path.join(out_dir, name)
        save_rotation_file(path, layers, more)
        load_rotation_file(path, head_dim, num_kv_heads, sorted(layers))   # validates orthogonality
        paths.append(path)
    return paths


def make_rotation(args) -> int:
    from aphrodite_int2kv.int2.rotation import hadamard

    try:
        head_dim, kv_heads, layers = model_shape(args.model)
        H = hadamard(head_dim)
        paths = _write_and_verify(args.out, {i: H for i in layers}, {i: H for i in layers}, head_dim, kv_heads)
    except Int2ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {paths[0]} and {paths[1]}: Hadamard {head_dim}x{head_dim} for {len(layers)} attention "
          f"layers {layers[:8]}{'...' if len(layers) > 8 else ''}; orthogonality verified")
    print(f"use: APHRODITE_INT2KV_K_ROTATION={paths[0]} APHRODITE_INT2KV_V_ROTATION={paths[1]}")
    return 0


def calibrate(args) -> int:
    import torch

    from aphrodite_int2kv.cli.eval import evaluate, print_table
    from aphrodite_int2kv.quality import assets, smollm
    from aphrodite_int2kv.quality.calibrate import collect, fit
    from aphrodite_int2kv.quality.schemes import Scheme

    if args.model != "smollm2":
        print("error: calibrate runs the built-in SmolLM2-135M only (--model smollm2); other models "
              "need their own forward pass and are not supported yet", file=sys.stderr)
        return 2
    cfg, sd, tok = smollm.load(assets.model_path())
    ids = tok.encode(open(assets.text_path(), encoding="utf-8").read()).ids
    wins = [torch.tensor(ids[args.calib_start + w * 1024:args.calib_start + (w + 1) * 1024])
            for w in range(args.calib_windows)]
    print(f"calibrating on {len(wins)} x 1024 tokens from token {args.calib_start} ...", file=sys.stderr)
    k_layers, v_layers, extra = fit(collect(cfg, sd, wins), cfg.n_kv_heads, args.group_size)
    k_path, v_path = _write_and_verify(args.out, k_layers, v_layers, cfg.head_dim, cfg.n_kv_heads, extra)
    G = args.group_size
    rows = evaluate([Scheme("fp", "fp"),
                     Scheme(f"int2 hadamard G{G}", "int2", group_size=G),
                     Scheme(f"int2 calibrated G{G}", "int2", group_size=G, k_rotation=k_path, v_rotation=v_path),
                     Scheme(f"int2 calibrated G{G} + K offset", "int2", group_size=G, k_rotation=k_path,
                            v_rotation=v_path, center=True)],
                    windows=args.eval_windows)
    print_table(rows)
    had, cal = rows[1]["rel_increase"], min(rows[2]["rel_increase"], rows[3]["rel_increase"])
    if cal < had:
        print(f"calibrated rotation: PPL increase {100 * cal:+.1f}% vs Hadamard {100 * had:+.1f}% on held-out "
              f"text -> use it (with centering if that row is the better one)")
    else:
        print(f"calibrated rotation is WORSE than plain Hadamard on held-out text ({100 * cal:+.1f}% vs "
              f"{100 * had:+.1f}%): keep the built-in Hadamard")
    print(f"wrote {k_path} (rotation + k_offset per layer) and {v_path}")
    return 0


def k_offsets(args) -> int:
    import torch

    from aphrodite_int2kv.int2.rotation import hadamard
    from aphrodite_int2kv.quality.k_offsets import collect

    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        print("error: k-offsets needs transformers (pip install transformers)", file=sys.stderr)
        return 2
    if not os.path.isfile(args.text):
        print(f"error: --text {args.text!r} does not exist", file=sys.stderr)
        return 2
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=getattr(torch, args.dtype)).to(args.device).eval()
    ids = torch.tensor(tok(open(args.text, encoding="utf-8").read())["input_ids"][:args.tokens])
    if len(ids) < args.window:
        print(f"error: {args.text} has {len(ids)} tokens; need at least --window {args.window}", file=sys.stderr)
        return 2
    windows = [ids[i:i + args.window] for i in range(0, len(ids) - args.window + 1, args.window)]
    offsets = collect(model, windows, skip=args.skip)
    head_dim, kv_heads, layers = model_shape(args.model) if os.path.isdir(args.model) else (None, None, None)
    some = next(iter(offsets.values()))
    head_dim, kv_heads = head_dim or some.shape[-1], kv_heads or some.shape[0]
    if layers is not None and sorted(offsets) != layers:
        print(f"error: keys were recorded for layers {sorted(offsets)} but config.json lists attention "
              f"layers {layers}", file=sys.stderr)
        return 2
    H = hadamard(head_dim)
    paths = _write_and_verify(args.out, {i: H for i in offsets}, {i: H for i in offsets}, head_dim, kv_heads,
                              extra={i: {"k_offset": o} for i, o in offsets.items()})
    energy = {i: float(o.pow(2).sum(-1).mean()) for i, o in offsets.items()}
    print(f"wrote {paths[0]} (Hadamard + K offsets over {len(windows)} x {args.window} tokens, first "
          f"{args.skip} of each window left out) and {paths[1]}; mean |offset|^2 per layer: "
          + ", ".join(f"{i}: {e:.3g}" for i, e in list(energy.items())[:8]) + (" ..." if len(energy) > 8 else ""))
    print(f"use: APHRODITE_INT2KV_K_ROTATION={paths[0]} APHRODITE_INT2KV_V_ROTATION={paths[1]}")
    return 0
