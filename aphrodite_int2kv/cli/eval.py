"""``aphrodite-int2kv eval``: perplexity of a real LM (SmolLM2-135M by default) with its K/V passed
through each KV scheme, against full precision. CPU by default; minutes. See docs/quality.md."""

from __future__ import annotations

import json
import math
import shlex
import sys
import time


def add_parser(sub):
    p = sub.add_parser("eval", help="perplexity with int2 (and baseline) KV caches on a real model")
    p.add_argument("--text", default="moby-dick", help="'moby-dick' (fetched once) or a text file")
    p.add_argument("--tokens", type=int, default=1024, help="tokens per window")
    p.add_argument("--windows", type=int, default=4, help="non-overlapping windows")
    p.add_argument("--start", type=int, default=78003, help="first token of the first window")
    p.add_argument("--schemes", default="standard",
                   help="'standard' (the full comparison table), 'engine-dtypes' (the engine's own KV dtypes: fp8 "
                        "and the turboquant presets, rebuilt, beside int2's default) or 'custom' (one int2 row from "
                        "the options below)")
    p.add_argument("--group-size", type=int, default=32)
    p.add_argument("--k-rotation", default="hadamard", help="hadamard | none | rotation file")
    p.add_argument("--v-rotation", default="hadamard")
    p.add_argument("--k-clip", type=float, default=1.0)
    p.add_argument("--v-clip", type=float, default=1.0)
    p.add_argument("--levels", default="std", choices=["std", "minmax", "lloyd-max"],
                   help="level mode, as APHRODITE_INT2KV_LEVELS (std: the engine default)")
    p.add_argument("--recent", type=int, default=0, help="full-precision recent window (tokens)")
    p.add_argument("--sink", type=int, default=0, help="full-precision first tokens")
    p.add_argument("--center", action="store_true", help="subtract a per-head K offset before quantizing")
    p.add_argument("--center-first", type=int, default=0,
                   help="data-free K centering as the engine does it (APHRODITE_INT2KV_K_CENTER_FIRST, default "
                        "16 there): each window's offset is the mean of its first N keys as int2 reads them back, "
                        "those N stored uncentered; 0 = off")
    p.add_argument("--json", default=None, help="write the rows (a JSON list) here")
    p.add_argument("--model", default=None,
                   help="a causal LM to measure instead of SmolLM2-135M: a Hugging Face directory, a GGUF file or "
                        "gemma-3-270m (fetched on first use); with --engine a GGUF is dequantized to a bf16 "
                        "checkpoint the engine serves")
    from aphrodite_int2kv.quality.engine_eval import add_arguments
    add_arguments(p)
    p.set_defaults(func=run)


def _progress(i, n, label, t0):
    width = 24
    done = int(width * i / n)
    sys.stderr.write(f"\r[{'#' * done}{'.' * (width - done)}] {i}/{n} {label[:48]:<48} {time.time() - t0:6.0f}s")
    sys.stderr.flush()


def evaluate(schemes, text="moby-dick", tokens=1024, windows=4, start=78003, progress=True, model=None):
    """`model`: a Hugging Face causal LM directory (None: SmolLM2-135M)."""
    import torch

    from aphrodite_int2kv.quality import assets, smollm
    from aphrodite_int2kv.quality.schemes import KVTransform, attention_fn

    runner = smollm.harness_model(model)
    cfg, tok = runner.cfg, runner.tok
    path = assets.text_path(text)
    ids = tok.encode(open(path, encoding="utf-8").read()).ids
    if start + windows * tokens > len(ids):
        start = max(0, len(ids) - windows * tokens)
    if len(ids) < tokens + 1:
        raise ValueError(f"{path} has only {len(ids)} tokens; need at least {tokens + 1}")
    wins = [torch.tensor(ids[start + w * tokens:start + (w + 1) * tokens])
            for w in range(windows) if start + (w + 1) * tokens <= len(ids)]
    late = tokens // 2
    rows, t0, n = [], time.time(), len(schemes) * len(wins)
    for si, scheme in enumerate(schemes):
        tf = KVTransform(scheme, cfg.head_dim, cfg.n_kv_heads, cfg.n_layers)
        attn = attention_fn(scheme, tf, cfg.head_dim ** -0.5)
        nll_all, nll_late = [], []
        for wi, w in enumerate(wins):
            if progress:
                _progress(si * len(wins) + wi, n, scheme.name, t0)
            logits = runner.forward(w, attn)
            nll = torch.nn.functional.cross_entropy(logits[:-1], w[1:], reduction="none")
            nll_all.append(nll)
            nll_late.append(nll[late - 1:])    # predictions of positions late..tokens-1
        rows.append(dict(scheme=scheme.name, bits_per_element=round(scheme.bits_per_element(cfg.head_dim, layers=cfg.n_layers), 3),
                         ppl=math.exp(torch.cat(nll_all).mean().item()),
                         late_ppl=math.exp(torch.cat(nll_late).mean().item()),
                         tokens=sum(len(w) for w in wins), windows=len(wins), text=text,
                         **({"kv_cache_dtype": scheme.engine_dtype} if scheme.engine_dtype else {})))
    if progress:
        _progress(n, n, "done", t0)
        sys.stderr.write("\n")
    fp = next((r for r in rows if r["scheme"] == "fp"), None)
    if fp is None:  # the reference row is always computed
        fp = evaluate([type(schemes[0])("fp", "fp")], text, tokens, windows, start, progress=False, model=model)[0]
    for r in rows:
        r["fp_ppl"] = fp["ppl"]
        r["rel_increase"] = r["ppl"] / fp["ppl"] - 1
        r["late_rel_increase"] = r["late_ppl"] / fp["late_ppl"] - 1
    return rows


def print_table(rows):
    print(f"{'scheme':<52} {'bits':>5} {'PPL':>9} {'vs fp':>9} {'late-half vs fp':>16}")
    for r in rows:
        print(f"{r['scheme']:<52} {r['bits_per_element']:>5.2f} {r['ppl']:>9.2f} "
              f"{100 * r['rel_increase']:>+8.1f}% {100 * r['late_rel_increase']:>+15.1f}%")
    print(f"({rows[0]['tokens']} tokens of {rows[0]['text']} in {rows[0]['windows']} windows; "
          f"late half = second half of each window)")


def run(args) -> int:
    if args.engine:
        from aphrodite_int2kv.quality.engine_eval import run_engine
        return run_engine(args)
    from aphrodite_int2kv.quality.schemes import Scheme, engine_dtype_schemes, standard_schemes

    if args.schemes == "standard":
        schemes = standard_schemes()
    elif args.schemes == "engine-dtypes":
        schemes = engine_dtype_schemes()
    elif args.schemes == "custom":
        name = (f"int2 G{args.group_size} K-rot={args.k_rotation} V-rot={args.v_rotation}"
                f" levels={args.levels} clip{args.k_clip}/{args.v_clip}"
                f" sink{args.sink} recent{args.recent}{' K-center' if args.center else ''}"
                f"{f' K-mean of first {args.center_first}' if args.center_first else ''}")
        if args.center and args.center_first:
            print("--center and --center-first are two ways of centering K; pick one", file=sys.stderr)
            return 2
        if args.center_first < 0:
            print(f"--center-first {args.center_first}: a number of tokens, 0 = off", file=sys.stderr)
            return 2
        free = dict(center=True, center_skip=args.center_first, center_from_cache=True) if args.center_first else {}
        schemes = [Scheme("fp", "fp"),
                   Scheme(name, "int2", group_size=args.group_size, k_rotation=args.k_rotation,
                          v_rotation=args.v_rotation, k_clip=args.k_clip, v_clip=args.v_clip,
                          lloyd_max=args.levels == "lloyd-max", std_range=args.levels == "std",
                          recent=args.recent, sink=args.sink, **({"center": args.center} | free))]
    else:
        print(f"--schemes must be 'standard', 'engine-dtypes' or 'custom', not {args.schemes!r}", file=sys.stderr)
        return 2
    rows = evaluate(schemes, args.text, args.tokens, args.windows, args.start, model=args.model)
    print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


def add_longctx_parser(sub):
    p = sub.add_parser("longctx", help="long-context quality far from the recent window: copy test, far perplexity, "
                                       "pass keys (teacher-forced; fp vs each KV scheme)")
    p.add_argument("--schemes", default="candidates", choices=["candidates", "sweep", "engine-dtypes"],
                   help="'candidates': the formats compared for long contexts (docs/quality.md); 'sweep': every "
                        "variant of the design study (a GPU helps); 'engine-dtypes': the engine's own KV dtypes "
                        "rebuilt beside int2's default")
    p.add_argument("--only", default="", help="comma-separated substrings: keep the schemes whose name has one (fp is "
                                              "always kept)")
    from aphrodite_int2kv.quality.longctx import add_suite_arguments
    add_suite_arguments(p)
    p.add_argument("--model", default=None,
                   help="a Hugging Face causal LM to measure instead of SmolLM2-135M: a directory, a GGUF file, or "
                        "gemma-3-270m (fetched on first use); transformers runs it, every global attention layer "
                        "reads the scheme's K/V, sliding-window layers stay in full precision")
    from aphrodite_int2kv.engine.options import LOCAL_KV_DTYPES

    p.add_argument("--local-kv-dtype", default="auto", choices=LOCAL_KV_DTYPES,
                   help="--model with sliding-window layers: the cache those layers read in every row but fp's, as "
                        "APHRODITE_INT2KV_LOCAL_KV_DTYPE sets it in the engine (fp8: e4m3, the engine's scale of 1); "
                        "fp8 adds a row with the global layers in full precision")
    p.add_argument("--rotations", default=None,
                   help="a folder with k_rotation.pt / v_rotation.pt (aphrodite-int2kv calibrate): each tile row "
                        "selected is measured with them too")
    p.add_argument("--device", default="cpu", help="torch device for the forward (cpu, cuda): the same fp32 arithmetic")
    p.add_argument("--json", default=None)
    p.set_defaults(func=run_longctx)


def run_longctx(args) -> int:
    import dataclasses

    import torch

    from aphrodite_int2kv.quality import longctx, smollm
    from aphrodite_int2kv.quality.schemes import KVTransform, attention_fn, engine_dtype_schemes, longctx_schemes

    if args.device != "cpu":
        torch.set_default_device(args.device)
    model = smollm.harness_model(args.model, args.device)
    cfg, tok = model.cfg, model.tok
    schemes = longctx_schemes(args.schemes == "sweep") if args.schemes != "engine-dtypes" else engine_dtype_schemes()
    if args.only:
        keys = args.only.split(",")
        schemes = [s for s in schemes if s.kind == "fp" or any(k in s.name for k in keys)]
    if args.rotations:
        import os

        k_rot, v_rot = (os.path.join(args.rotations, f) for f in ("k_rotation.pt", "v_rotation.pt"))
        schemes += [dataclasses.replace(s, name=s.name + " + calibrated rotations", k_rotation=k_rot, v_rotation=v_rot)
                    for s in schemes if s.kind == "tiles"]
    if args.local_kv_dtype != "auto":
        if not getattr(model, "local_layers", 0):
            raise SystemExit(f"longctx --local-kv-dtype {args.local_kv_dtype}: the model has no sliding-window layers "
                             "(drop the flag, or give --model a model with local attention such as gemma-3-270m)")
        local = f" + {args.local_kv_dtype} local layers"
        schemes = [schemes[0], dataclasses.replace(schemes[0], name="fp" + local)] + [
            dataclasses.replace(s, name=s.name + local) for s in schemes[1:]]
    items = longctx.suite_items(tok, **longctx.suite_flags(args))
    longest = max(len(seq) for _, seq, _, _ in items)
    t0, rows, fp = time.time(), [], None
    total = len(schemes) * len(items)
    for si, scheme in enumerate(schemes):
        attn = attention_fn(scheme, KVTransform(scheme, cfg.head_dim, cfg.n_kv_heads, cfg.n_layers), cfg.head_dim ** -0.5)
        if si > 0:        # every row but the full-precision reference (the first)
            attn.local_kv_dtype = args.local_kv_dtype
        res = longctx.score_items(model, items, attn, reference=fp,
                                  progress=lambda i, label: _progress(si * len(items) + i, total,
                                                                      f"{scheme.name[:30]} {label}", t0))
        if fp is None:
            fp = res
        row = dict(scheme=scheme.name, **({"kv_cache_dtype": scheme.engine_dtype} if scheme.engine_dtype else {}),
                   bits_at_context=round(scheme.bits_per_element(cfg.head_dim, context=longest, layers=cfg.n_layers), 3),
                   bits_32k=round(scheme.bits_per_element(cfg.head_dim, context=32768, layers=cfg.n_layers), 3),
                   bits_32k_d128=round(scheme.bits_per_element(128, context=32768), 3),
                   tasks=longctx.summarize(res, fp))
        rows.append(row)
        if args.json:   # rows as they come: a long run keeps what it measured
            with open(args.json, "w") as f:
                json.dump(dict(context=longest, command="aphrodite-int2kv longctx " + shlex.join(sys.argv[2:]),
                               env=_env(args.device), rows=rows), f, indent=1)
    _progress(total, total, "done", t0)
    sys.stderr.write("\n")
    print_longctx(rows)
    return 0


def _env(device: str) -> dict:
    import datetime
    import platform

    import torch

    where = torch.cuda.get_device_name() if device.startswith("cuda") else f"cpu ({platform.processor() or 'x86_64'})"
    return dict(device=where, torch=torch.__version__, python=platform.python_version(),
                date=datetime.date.today().isoformat())


def print_longctx(rows):
    tasks = list(rows[0]["tasks"])
    head = [t.replace("copy@", "copy ").replace(":moby-dick", " MD").replace(":sotu", " SOTU") for t in tasks]
    print(f"{'scheme':<56} {'b@ctx':>6} {'b@32K':>6} {'D128':>5} " + " ".join(f"{h:>13}" for h in head))
    for r in rows:
        cells = []
        for t in tasks:
            m = r["tasks"][t]
            if t.startswith("copy"):
                cells.append(f"{100 * m['top1']:>12.1f}%")
            elif t.startswith("far"):
                cells.append(f"{100 * m['rel']:>+12.1f}%")
            else:
                cells.append(f"{m['right']:>9}/{m['fp_right']:<3}")
        print(f"{r['scheme'][:56]:<56} {r['bits_at_context']:>6.2f} {r['bits_32k']:>6.2f} {r['bits_32k_d128']:>5.2f} "
              + " ".join(cells))
    print("copy: top-1 on the repeat; far: perplexity vs fp over each window's second half; "
          "passkey: right where fp is right")
