#!/usr/bin/env python3
"""Reliability of the OpenAI-compatible server under load and faults, int2 against the bf16 control.

  python3 benchmarks/serve_faults.py --model-config dense8b --kv auto,int2 --out $OUT/serve_faults.json

For each KV dtype it starts `aphrodite run` on loopback (dummy weights of a real model's shapes, the
tiny tokenizer of make_models.py, CUDA graphs on) and runs, bounded in count and time:
  soak     --requests requests at --concurrency, mixed lengths (--long of them at --long-len, the
           rest 16 to --short-max tokens), half streamed; each must finish with finish_reason
           "length" and exactly max_tokens tokens (ignore_eos); the server's GPU and host memory
           sampled throughout
  aborts   --aborts clients that hang up mid-prefill (long prompts) or mid-decode (after a few
           streamed chunks); the server must keep serving, and once idle its own KV usage
           (/metrics aphrodite:kv_cache_usage_perc) must be back where it started
  bad      a prompt longer than max-model-len, max_tokens 0, n too large, logprobs out of range:
           each must get an HTTP 4xx naming the problem, and a normal request must succeed after
  preempt  a second server with a pool of --preempt-blocks pages, on make_models.py's tiny model
           of the same family with its saved weights (dummy weights give near-equal logits, so
           their greedy text says nothing about the KV cache): output-heavy requests sized to the
           pool the engine reports run one at a time, then all at once, which makes the engine
           preempt and recompute (aphrodite:num_preemptions), and in waves that fit the pool
           (batched without preemption: the dtype's own batching noise); the greedy outputs must
           be equal, or part only at a near-tie (top-1 / top-2 gap under --tie-gap), and no more
           often all at once than in waves
Servers start one after another and, with --parallel, stop only at the end (the engine's memory
profiling fails when another process frees GPU memory meanwhile); with --parallel a server's
phases run while the next one starts, so bf16 and int2 share the GPU (give each its --gpu-mem). Prints a table and writes one JSON object
per dtype to --out (server logs beside it); --deadline-s skips phases that would start after it.

On the H200 machine: run `bash benchmarks/server_wheels.sh` here first (the server's packages,
into .whl/server-site.tar.xz), carry .gpu-bundle and .whl, then `source benchmarks/gpu_setup.sh; python3
.gpu-bundle/gpu/make_models.py /tmp/models` (the tokenizer, the tiny models and the hybrid's base
config) before this script. --model-config hybrid27b for the Qwen3.5-style hybrid.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_throughput import CONFIGS, HYBRID_TEXT  # noqa: E402

VOCAB = 1024          # make_models.py's model vocabulary (its tokenizer uses fewer ids)
PROMPT_IDS = (10, 880)
MODEL_NAME = "m"


# ---- the request plans and the checks (no server needed: aphrodite_int2kv_tests/test_serve_faults.py)

def soak_plan(n: int, long: int, long_len: int, seed: int = 0, short_max: int = 2048) -> list[dict]:
    """n completion requests: `long` of them with long_len-token prompts, spread through the run,
    the rest 16 to short_max tokens; 1-128 output tokens; every other one streamed."""
    rng = random.Random(seed)
    at_long = set(rng.sample(range(n), min(long, n)))
    plan = []
    for i in range(n):
        length = long_len if i in at_long else rng.randint(16, short_max)
        plan.append(dict(id=i, prompt_len=length, max_tokens=rng.randint(1, 128), stream=i % 2 == 1,
                         seed=rng.randrange(1 << 30)))
    return plan


PREEMPT_MAX_REQUESTS = 32   # preempt_plan's most requests, so the most that ever run at once


def preempt_plan(pool_tokens: int, max_model_len: int, n_min: int = 8, n_max: int = PREEMPT_MAX_REQUESTS,
                 demand: float = 2.5) -> list[dict]:
    """Greedy requests that each fit the pool alone but together ask for `demand` x the pool, a
    quarter prompt and three quarters output, so that the running requests outgrow the pool while
    they decode (the scheduler admits a prompt only where it fits, so prompts alone never force a
    preemption): each at most a third of the pool and within max-model-len, n_min to n_max."""
    per_request = min(max_model_len - 8, pool_tokens // 3)
    if per_request < 256:
        raise ValueError(f"a pool of {pool_tokens} tokens with max-model-len {max_model_len} leaves "
                         f"{per_request} tokens per request: raise --preempt-blocks")
    n = max(n_min, min(n_max, -(-int(demand * pool_tokens) // per_request)))
    prompt = per_request // 4
    return [dict(id=i, prompt_len=prompt - 7 * (i % 8), max_tokens=per_request - prompt, seed=100 + i)
            for i in range(n)]


def preempt_max_seqs(blocks: int) -> int:
    """max-num-seqs of the preemption server: on a hybrid every running sequence holds a Gated
    DeltaNet state block of the same pool, and the engine refuses to capture CUDA graphs for more
    sequences than the pool has blocks ("max_num_seqs (1024) exceeds available Mamba cache
    blocks (64)"); half the pool leaves the rest to attention pages, and no more than
    preempt_plan's requests ever run at once."""
    return max(1, min(PREEMPT_MAX_REQUESTS, blocks // 2))


def engine_kv_tokens(log_text: str) -> int:
    """The pool in tokens as the engine reports it at start-up ("GPU KV cache size: N tokens"):
    with int2 the recent window's pages share the blocks, so blocks x block size overstates it."""
    import re

    found = re.findall(r"GPU KV cache size: ([\d,]+) tokens", log_text)
    if not found:
        raise RuntimeError("the server log has no 'GPU KV cache size' line")
    return int(found[-1].replace(",", ""))


def first_divergence(alone: dict, together: dict) -> dict:
    """Where two greedy runs of one request part (token lists and top-2 logprobs of the
    completions API's `logprobs`), and the top-1 / top-2 gap of the run alone there. Batching
    alone moves logits by bf16 rounding, which flips a near-tie; a divergence at a wide gap is a
    cache that read back something else (after a preemption: the recomputed KV)."""
    a, b = alone.get("tokens") or [], together.get("tokens") or []
    if a == b:
        return dict(at=-1, gap=None)
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    top = (alone.get("top_logprobs") or [])[at:at + 1]
    values = sorted(top[0].values(), reverse=True) if top and top[0] else []
    return dict(at=at, gap=round(values[0] - values[1], 4) if len(values) > 1 else None)


def prompt_ids(length: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(*PROMPT_IDS) for _ in range(length)]


def completion_body(req: dict, temperature: float = 0.0, **extra) -> dict:
    body = dict(model=MODEL_NAME, prompt=prompt_ids(req["prompt_len"], req["seed"]), max_tokens=req["max_tokens"],
                temperature=temperature, ignore_eos=True, stream=req.get("stream", False), **extra)
    if body["stream"]:
        body["stream_options"] = {"include_usage": True}
    return body


def parse_sse(lines) -> dict:
    """A streamed completion's `data:` lines -> {text, finish_reason, usage, chunks, done}."""
    out = dict(text="", finish_reason=None, usage=None, chunks=0, done=False)
    for raw in lines:
        line = raw.decode() if isinstance(raw, bytes) else raw
        line = line.strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            out["done"] = True
            break
        msg = json.loads(data)
        if msg.get("usage"):
            out["usage"] = msg["usage"]
        for choice in msg.get("choices") or []:
            out["chunks"] += 1
            out["text"] += choice.get("text") or ""
            if choice.get("finish_reason"):
                out["finish_reason"] = choice["finish_reason"]
    return out


def check_completion(req: dict, status: int, result: dict) -> str:
    """'' when the response is complete and right, else what is wrong."""
    if status != 200:
        return f"HTTP {status}: {str(result)[:200]}"
    if req.get("stream") and not result.get("done"):
        return "stream ended without [DONE]"
    usage = result.get("usage") or {}
    if result.get("finish_reason") != "length":
        return f"finish_reason {result.get('finish_reason')!r}, wanted 'length' (ignore_eos)"
    if usage.get("completion_tokens") != req["max_tokens"]:
        return f"{usage.get('completion_tokens')} tokens, wanted {req['max_tokens']}"
    if usage.get("prompt_tokens") != req["prompt_len"]:
        return f"{usage.get('prompt_tokens')} prompt tokens, wanted {req['prompt_len']}"
    return ""


def parse_metrics(text: str) -> dict:
    """Prometheus text -> {name: value summed over label sets} (aphrodite:* only; a counter under
    its own name, without the _total the exposition adds; its _created stamp left out)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("aphrodite:"):
            continue
        name_labels, _, value = line.rpartition(" ")
        name = name_labels.split("{", 1)[0]
        if name.endswith("_created"):
            continue
        name = name.removesuffix("_total")
        try:
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            pass
    return out


def drift(samples: list[tuple], skip: float = 0.2) -> dict:
    """Memory samples (t, gpu MiB, host MiB[, ...]) -> first / last / max after the first `skip` of
    the run (warm-up), and last - first."""
    if not samples:
        return {}
    kept = samples[int(len(samples) * skip):] or samples
    g = [s[1] for s in kept]
    h = [s[2] for s in kept]
    return dict(gpu_mib_first=g[0], gpu_mib_last=g[-1], gpu_mib_max=max(g), gpu_mib_drift=g[-1] - g[0],
                host_mib_first=h[0], host_mib_last=h[-1], host_mib_max=max(h), host_mib_drift=h[-1] - h[0],
                samples=len(samples))


# ---- the server and its clients

def is_hybrid(model_dir) -> bool:
    """A Qwen3.5 config (a text_config with its layer types): hybrid27b's and the tiny qwen35's."""
    with open(os.path.join(model_dir, "config.json")) as f:
        return "text_config" in json.load(f)


def server_command(model_dir, kv, port, max_model_len, extra=(), load_format="dummy", gpu_mem=None) -> list[str]:
    """`aphrodite run` on loopback, no prefix caching (so freed blocks show as free), the attention
    backend eval --engine uses for the dtype (quality/engine_eval.py)."""
    from aphrodite_int2kv.quality.engine_eval import baseline_backend

    if is_hybrid(model_dir):
        extra = ["--language-model-only", "--gdn-prefill-backend", "triton", *extra]
    backend = baseline_backend(kv).get("attention_config", {}).get("backend")
    if backend:
        extra = [*extra, "--attention-backend", backend]
    if gpu_mem:
        extra = [*extra, "--gpu-memory-utilization", str(gpu_mem)]
    exe = shutil.which("aphrodite")
    cmd = [exe] if exe else [sys.executable, "-m", "aphrodite.entrypoints.cli.main"]
    cmd += ["run", model_dir, "--host", "127.0.0.1", "--port", str(port), "--served-model-name", MODEL_NAME,
            "--load-format", load_format, "--dtype", "bfloat16", "--kv-cache-dtype", kv,
            "--max-model-len", str(max_model_len), "--no-enable-prefix-caching", "--seed", "0", *extra]
    return cmd


class Server:
    def __init__(self, model_dir, kv, port, max_model_len, extra=(), log=None, **how):
        self.cmd, self.port = server_command(model_dir, kv, port, max_model_len, extra, **how), port
        self.log = open(log or os.devnull, "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout=900):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode} before it was ready: {self.cmd}")
            try:
                if request(self.port, "GET", "/health", timeout=5)[0] == 200:
                    return time.time() - t0
            except OSError:
                pass
            time.sleep(2)
        raise TimeoutError(f"server not ready after {timeout} s")

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
        self.log.close()

    def alive(self):
        return self.proc.poll() is None

    def memory(self) -> tuple[float, float, float]:
        """(GPU MiB of the server's process tree, host RSS MiB of that tree, GPU MiB in use on the
        whole GPU). The tree's GPU memory is NaN where nvidia-smi cannot name its processes."""
        tree = process_tree(self.proc.pid)
        gpu_total, gpu_tree = float("nan"), float("nan")
        try:
            gpu_total = float(nvidia_smi("--query-gpu=memory.used").split()[0])
            apps = [line.split(",") for line in nvidia_smi("--query-compute-apps=pid,used_memory").splitlines()]
            mine = [float(mib) for pid, mib in apps if int(pid) in tree]
            if mine:
                gpu_tree = sum(mine)
        except (OSError, ValueError, IndexError, subprocess.SubprocessError):
            pass
        return gpu_tree, rss_mib(tree), gpu_total


def nvidia_smi(query: str) -> str:
    return subprocess.run(["nvidia-smi", query, "--format=csv,noheader,nounits"], capture_output=True,
                          text=True, timeout=10).stdout


def process_tree(pid: int) -> set[int]:
    """A process and all its descendants (/proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    tree, todo = set(), [pid]
    while todo:
        p = todo.pop()
        tree.add(p)
        todo.extend(children.get(p, []))
    return tree


def rss_mib(pids) -> float:
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            pass
    return total / 1024


def request(port, method, path, body=None, timeout=600, stream=False, hang_up_after=None):
    """(status, parsed body). stream: parse the SSE stream. hang_up_after: ('seconds', s) closes the
    connection s seconds after sending; ('chunks', k) after k streamed data lines."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers={"Content-Type": "application/json"})
        if hang_up_after and hang_up_after[0] == "seconds":
            time.sleep(hang_up_after[1])
            return -1, "hung up"
        resp = conn.getresponse()
        if stream and resp.status == 200:
            if hang_up_after:      # ('chunks', k)
                seen = 0
                while seen < hang_up_after[1]:
                    line = resp.fp.readline()
                    if not line:
                        break
                    seen += line.startswith(b"data:")
                return -1, "hung up"
            return resp.status, parse_sse(iter(resp.fp.readline, b""))
        raw = resp.read().decode(errors="replace")
        try:
            return resp.status, json.loads(raw)
        except ValueError:
            return resp.status, raw
    finally:
        conn.close()


def completion(port, req, **extra):
    status, body = request(port, "POST", "/v1/completions", completion_body(req, **extra), stream=req.get("stream"))
    if status == 200 and not req.get("stream"):
        choice = body["choices"][0]
        lp = choice.get("logprobs") or {}
        body = dict(text=choice.get("text"), finish_reason=choice.get("finish_reason"), usage=body.get("usage"),
                    tokens=lp.get("tokens"), top_logprobs=lp.get("top_logprobs"))
    return status, body


def metrics_text(port) -> str:
    status, text = request(port, "GET", "/metrics", timeout=30)
    return text if status == 200 and isinstance(text, str) else ""


def metrics(port) -> dict:
    return parse_metrics(metrics_text(port))


def wait_idle(port, timeout=300):
    t0 = time.time()
    while time.time() - t0 < timeout:
        m = metrics(port)
        if m.get("aphrodite:num_requests_running", 1) == 0 and m.get("aphrodite:num_requests_waiting", 1) == 0:
            return m
        time.sleep(1)
    return metrics(port)


def progress(label, done, total, t0):
    print(f"  {label}: {done}/{total} ({time.time() - t0:.0f} s)", flush=True)


# ---- the phases

def soak(server, args, label):
    plan = soak_plan(args.requests, args.long, args.long_len, short_max=args.short_max)
    samples, stop = [], threading.Event()

    def sample():
        t0 = time.time()
        while not stop.is_set():
            samples.append((round(time.time() - t0, 1), *server.memory()))
            stop.wait(args.sample_s)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    errors, t0, done, lock = [], time.time(), [0], threading.Lock()

    def run(req):
        try:
            status, result = completion(server.port, req)
            why = check_completion(req, status, result)
        except Exception as exc:   # noqa: BLE001 - a failed request is a result here
            why = f"{type(exc).__name__}: {exc}"
        with lock:
            done[0] += 1
            if done[0] % 100 == 0 or done[0] == len(plan):
                progress(f"{label} soak", done[0], len(plan), t0)
        return req["id"], why

    with ThreadPoolExecutor(args.concurrency) as pool:
        for rid, why in pool.map(run, plan):
            if why:
                errors.append((rid, why))
    stop.set()
    sampler.join()
    # the process tree's GPU memory where nvidia-smi names it, else the whole GPU's
    per_server = all(s[1] == s[1] for s in samples)
    curve = [(t, g if per_server else total, h) for t, g, h, total in samples]
    return dict(requests=len(plan), errors=len(errors), first_errors=errors[:10], seconds=round(time.time() - t0, 1),
                long_requests=args.long, long_len=args.long_len, short_max=args.short_max,
                concurrency=args.concurrency, gpu_memory_of="server" if per_server else "whole GPU",
                memory=drift(curve), memory_curve=curve)


def aborts(server, args, label):
    before = wait_idle(server.port)
    rng = random.Random(1)
    hows = [("seconds", rng.uniform(0.05, 0.5)) if i % 2 == 0 else ("chunks", rng.randint(1, 8))
            for i in range(args.aborts)]
    t0, done, lock = time.time(), [0], threading.Lock()

    def run(i):
        if i % 2 == 0:      # mid-prefill: a long prompt, hung up before its first token
            req = dict(id=i, prompt_len=args.long_len // 2, max_tokens=64, stream=True, seed=i)
        else:               # mid-decode: a few streamed chunks, then gone
            req = dict(id=i, prompt_len=256 + 7 * i, max_tokens=512, stream=True, seed=i)
        try:
            request(server.port, "POST", "/v1/completions", completion_body(req), stream=True, hang_up_after=hows[i])
        except OSError:
            pass
        with lock:
            done[0] += 1
            if done[0] % 100 == 0 or done[0] == args.aborts:
                progress(f"{label} aborts", done[0], args.aborts, t0)

    with ThreadPoolExecutor(args.concurrency) as pool:
        list(pool.map(run, range(args.aborts)))
    after = wait_idle(server.port)
    probe = dict(id=-1, prompt_len=100, max_tokens=16, seed=5)
    status, result = completion(server.port, probe)
    key = "aphrodite:kv_cache_usage_perc"
    return dict(aborted=args.aborts, seconds=round(time.time() - t0, 1), kv_usage_before=before.get(key),
                kv_usage_after=after.get(key), running_after=after.get("aphrodite:num_requests_running"),
                waiting_after=after.get("aphrodite:num_requests_waiting"),
                serves_after=check_completion(probe, status, result) or "ok", alive=server.alive())


def bad_requests(server, args, label):
    ok = dict(prompt_len=100, max_tokens=8, seed=7)
    cases = {
        "prompt longer than max-model-len": (dict(ok, prompt_len=args.max_model_len + 16), {}),
        "max_tokens 0": (dict(ok, max_tokens=0), {}),
        "n = 100000": (ok, dict(n=100000, temperature=1.0)),
        "logprobs -2": (ok, dict(logprobs=-2)),
        "logprobs 1000": (ok, dict(logprobs=1000)),
    }
    out = {}
    for name, (req, extra) in cases.items():
        body = {**completion_body(dict(req, id=0)), **extra}
        status, result = request(server.port, "POST", "/v1/completions", body, timeout=120)
        message = result.get("error", result).get("message", "") if isinstance(result, dict) else str(result)
        out[name] = dict(status=status, message=str(message)[:300], clear=400 <= status < 500)
        print(f"  {label} bad request, {name}: HTTP {status} {str(message)[:120]}", flush=True)
    status, result = completion(server.port, dict(ok, id=0))
    return dict(cases=out, serves_after=check_completion(dict(ok, id=0), status, result) or "ok",
                alive=server.alive())


def compare_runs(plan, alone, batched, tie_gap) -> dict:
    """Each request's batched greedy run against its run alone: equal, or where it parted."""
    errors = [check_completion(r, *a) or check_completion(r, *b) for r, a, b in zip(plan, alone, batched)]
    parts = [first_divergence(a[1], b[1]) if isinstance(a[1], dict) and isinstance(b[1], dict) else dict(at=0, gap=None)
             for a, b in zip(alone, batched)]
    return dict(outputs_equal=sum(p["at"] == -1 for p in parts),
                parted_at_wide_gap=sum(p["at"] != -1 and (p["gap"] is None or p["gap"] > tie_gap) for p in parts),
                divergences=parts, errors=[e for e in errors if e][:10])


def preemption(server, args, label):
    """The plan alone (batch 1), in waves that fit the pool (batched, no preemption: the batching
    noise of this dtype) and all at once (batched with preemptions); with the KV recomputed right,
    the last parts from the runs alone no more, and no more widely, than the waves do."""
    pool = engine_kv_tokens(open(server.log.name).read())
    plan = preempt_plan(pool, args.preempt_max_len)
    t0 = time.time()
    ids = dict(logprobs=2, return_tokens_as_token_ids=True)     # token ids: two ids may print alike

    def batched(reqs):
        before = metrics(server.port).get("aphrodite:num_preemptions", 0.0)
        with ThreadPoolExecutor(len(reqs)) as workers:
            out = list(workers.map(lambda r: completion(server.port, r, **ids), reqs))
        return out, metrics(server.port).get("aphrodite:num_preemptions", 0.0) - before

    alone = [completion(server.port, r, **ids) for r in plan]
    wave = max(1, int(0.8 * pool) // (plan[0]["prompt_len"] + plan[0]["max_tokens"]))
    waves, wave_preemptions = [], 0.0
    for k in range(0, len(plan), wave):
        out, n = batched(plan[k:k + wave])
        waves += out
        wave_preemptions += n
    together, preempted = batched(plan)
    w = compare_runs(plan, alone, waves, args.tie_gap)
    t = compare_runs(plan, alone, together, args.tie_gap)
    print(f"  {label} preempt: {len(plan)} requests; waves of {wave}: {wave_preemptions:.0f} preemptions, "
          f"{w['outputs_equal']} equal, {w['parted_at_wide_gap']} parted wide; all at once: {preempted:.0f} "
          f"preemptions, {t['outputs_equal']} equal, {t['parted_at_wide_gap']} parted wide", flush=True)
    return dict(requests=len(plan), pool_tokens=pool, prompt_tokens=[r["prompt_len"] for r in plan],
                output_tokens=plan[0]["max_tokens"], tie_gap=args.tie_gap, preemptions=preempted,
                outputs_equal=t["outputs_equal"], parted_at_wide_gap=t["parted_at_wide_gap"],
                divergences=t["divergences"], errors=w["errors"] + t["errors"],
                waves=dict(size=wave, preemptions=wave_preemptions, outputs_equal=w["outputs_equal"],
                           parted_at_wide_gap=w["parted_at_wide_gap"], divergences=w["divergences"]),
                seconds=round(time.time() - t0, 1), alive=server.alive())


def model_dir_for(name, base_dir, layers: int = 0):
    """A config.json of the named shapes (e2e_throughput.py), its vocabulary cut to the tiny
    tokenizer's model vocabulary, beside that tokenizer (make_models.py's files in base_dir).
    `layers` > 0 keeps the first `layers` layers (every layer's shapes, and the hybrid's pattern of
    three Gated DeltaNet layers to one attention layer, unchanged): the suite exercises the cache's
    state machines, which a layer count does not change, and two servers of fewer layers share the
    GPU and start sooner."""
    path = f"/tmp/serve-{name}"
    os.makedirs(path, exist_ok=True)
    if name == "hybrid27b":
        cfg = json.load(open(os.path.join(base_dir, "qwen35", "config.json")))
        text = dict(HYBRID_TEXT, vocab_size=VOCAB)
        if layers:
            if layers % 4:
                raise SystemExit(f"--layers {layers}: the hybrid needs a multiple of 4 (3 GDN + 1 attention)")
            text.update(num_hidden_layers=layers, layer_types=HYBRID_TEXT["layer_types"][:layers])
        cfg["text_config"].update(text)
        tok_dir = os.path.join(base_dir, "qwen35")
    else:
        tok_dir = os.path.join(base_dir, "qwen3")
        tiny = json.load(open(os.path.join(tok_dir, "config.json")))     # its special tokens' ids
        cfg = dict(CONFIGS[name], vocab_size=VOCAB, bos_token_id=tiny.get("bos_token_id"),
                   eos_token_id=tiny.get("eos_token_id"))
        if layers:
            cfg["num_hidden_layers"] = layers
    json.dump(cfg, open(os.path.join(path, "config.json"), "w"))
    for f in os.listdir(tok_dir):
        if f.startswith("tokenizer") or f == "special_tokens_map.json":
            shutil.copy(os.path.join(tok_dir, f), path)
    return path


def tiny_model_for(name, base_dir):
    """make_models.py's tiny model of the same family, with its saved weights."""
    return os.path.join(base_dir, "qwen35" if name == "hybrid27b" else "qwen3")


MAIN_PHASES = (("soak", soak), ("aborts", aborts), ("bad", bad_requests))


def table(results) -> str:
    rows = ["| kv | requests | errors | aborted | KV usage before / after | bad requests with a 4xx | "
            "preemptions | greedy outputs equal (waves / all at once) | parted at a wide gap (waves / all at once) | "
            "GPU / host MiB drift |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        s, a, b, p = (r.get(k) or {} for k in ("soak", "aborts", "bad", "preempt"))
        mem = s.get("memory") or {}
        clear = sum(c["clear"] for c in (b.get("cases") or {}).values())
        errs = "; ".join(f"{k}: {v}" for k, v in r.items() if k.endswith("error")) + (
            f"; preempt: {p['error']}" if p.get("error") else "")
        rows.append(f"| {r['kv_cache_dtype']} | {s.get('requests')} | {s.get('errors')} | {a.get('aborted')} | "
                    f"{a.get('kv_usage_before')} / {a.get('kv_usage_after')} | {clear} of {len(b.get('cases') or {})} | "
                    f"{p.get('preemptions')} | {(p.get('waves') or {}).get('outputs_equal')} / {p.get('outputs_equal')} "
                    f"of {p.get('requests')} | {(p.get('waves') or {}).get('parted_at_wide_gap')} / "
                    f"{p.get('parted_at_wide_gap')} | "
                    f"{mem.get('gpu_mib_drift')} / {mem.get('host_mib_drift')} |" + (f" {errs}" if errs else ""))
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-config", default="dense8b", choices=sorted(CONFIGS) + ["hybrid27b"])
    ap.add_argument("--models-dir", default="/tmp/models", help="make_models.py's output (tokenizer, tiny models)")
    ap.add_argument("--kv", default="auto,int2", help="KV dtypes, one server each (auto = the bf16 control)")
    ap.add_argument("--phases", default="soak,aborts,bad,preempt")
    ap.add_argument("--layers", type=int, default=0,
                    help="main servers: the model's first N layers, shapes unchanged (0: all of them)")
    ap.add_argument("--parallel", action="store_true", help="run a server's phases while the next one starts")
    ap.add_argument("--gpu-mem", type=float, default=None, help="gpu-memory-utilization of each main server")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--long", type=int, default=4, help="soak requests with --long-len prompts")
    ap.add_argument("--long-len", type=int, default=32768)
    ap.add_argument("--short-max", type=int, default=2048, help="longest prompt of the other soak requests")
    ap.add_argument("--aborts", type=int, default=200)
    ap.add_argument("--max-model-len", type=int, default=40960)
    ap.add_argument("--preempt-blocks", type=int, default=64, help="KV pages of the preemption phase's server")
    ap.add_argument("--preempt-gpu-mem", type=float, default=0.05)
    ap.add_argument("--preempt-max-len", type=int, default=2048, help="its max-model-len")
    ap.add_argument("--tie-gap", type=float, default=0.05,
                    help="top-1 / top-2 logprob gap (nats) below which a greedy divergence is a batching near-tie")
    ap.add_argument("--sample-s", type=float, default=2.0, help="memory sampling period")
    ap.add_argument("--port", type=int, default=8011)
    ap.add_argument("--deadline-s", type=float, default=0, help="start no phase after this many seconds (0: none)")
    ap.add_argument("--server-arg", action="append", default=[], help="extra `aphrodite run` argument (repeat)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    t_start = time.time()
    phases = args.phases.split(",")
    model_dir = model_dir_for(args.model_config, args.models_dir, args.layers)
    log_dir = os.path.dirname(os.path.abspath(args.out))
    # pages of the same 128 tokens for every dtype on the dense model (int2's default there; the
    # hybrid's page size comes from its GDN alignment)
    pages = [] if is_hybrid(model_dir) else ["--block-size", "128"]
    kvs = args.kv.split(",")
    results = {kv: dict(model=args.model_config, kv_cache_dtype=kv, date=time.strftime("%Y-%m-%d"),
                        command=" ".join(sys.argv)) for kv in kvs}
    lock = threading.Lock()

    def save():
        with lock:
            json.dump(list(results.values()), open(args.out, "w"), indent=1)

    def late():
        return args.deadline_s and time.time() - t_start > args.deadline_s

    def run_phases(server, kv, names):
        row = results[kv]
        try:
            for name, fn in names:
                if late():
                    row[name] = dict(skipped=f"deadline of {args.deadline_s:.0f} s passed")
                    continue
                row[name] = fn(server, args, kv)
                save()
        except Exception as exc:   # noqa: BLE001 - the failure is the result
            row[f"{names[0][0]}_error"] = f"{type(exc).__name__}: {exc}"
        finally:
            save()

    # (phases, server) in start order: the main servers first, then the tiny preemption servers
    starts = []
    for i, kv in enumerate(kvs):
        main_phases = [(n, f) for n, f in MAIN_PHASES if n in phases]
        if main_phases:
            starts.append((kv, main_phases, "main", lambda kv=kv, i=i: Server(
                model_dir, kv, args.port + 2 * i, args.max_model_len, [*pages, *args.server_arg],
                log=os.path.join(log_dir, f"server_{kv}.log"), gpu_mem=args.gpu_mem)))
    for i, kv in enumerate(kvs):
        if "preempt" in phases:
            starts.append((kv, [("preempt", preemption)], "preempt", lambda kv=kv, i=i: Server(
                tiny_model_for(args.model_config, args.models_dir), kv, args.port + 2 * i + 1, args.preempt_max_len,
                ["--num-gpu-blocks-override", str(args.preempt_blocks),
                 "--max-num-seqs", str(preempt_max_seqs(args.preempt_blocks)), *pages, *args.server_arg],
                log=os.path.join(log_dir, f"server_{kv}_preempt.log"), load_format="auto",
                gpu_mem=args.preempt_gpu_mem)))
    # a server stops only once no other one is starting: the engine's memory profiling fails when
    # another process frees GPU memory meanwhile ("Error in memory profiling")
    threads, servers = [], []
    for kv, names, role, make in starts:
        if late():
            results[kv][f"{role}_error"] = f"not started: deadline of {args.deadline_s:.0f} s passed"
            continue
        print(f"[{kv}] starting the {role} server ({time.time() - t_start:.0f} s)", flush=True)
        server = make()
        try:
            results[kv][f"{role}_ready_s"] = round(server.wait_ready(), 1)
        except Exception as exc:   # noqa: BLE001
            results[kv][f"{role}_error"] = f"{type(exc).__name__}: {exc}"
            server.stop()
            continue
        thread = threading.Thread(target=run_phases, args=(server, kv, names))
        thread.start()
        threads.append(thread)
        servers.append(server)
        if not args.parallel:
            thread.join()
            server.stop()
    for thread in threads:
        thread.join()
    for server in servers:
        server.stop()
    save()
    print(table(list(results.values())))


if __name__ == "__main__":
    main()
