#!/usr/bin/env python3
"""Reliability of the OpenAI-compatible server under load and faults, int2 against the bf16 control.

  python3 benchmarks/serve_faults.py --model-config dense8b --kv auto,int2 --out $OUT/serve_faults.json

For each KV dtype it starts `aphrodite run` on loopback (dummy weights of a real model's shapes, the
tiny tokenizer of make_models.py, CUDA graphs on) and runs, bounded in count and time:
  soak     --requests requests at --concurrency, mixed lengths (--long of them at --long-len, the
           rest 16-2048 tokens), half streamed; each must finish with finish_reason "length" and
           exactly max_tokens tokens (ignore_eos); GPU and host memory sampled throughout
  aborts   --aborts clients that hang up mid-prefill (long prompts) or mid-decode (after a few
           streamed chunks); the server must keep serving, and once idle its own KV usage
           (/metrics aphrodite:kv_cache_usage_perc) must be back where it started
  bad      a prompt longer than max-model-len, max_tokens 0, n too large, logprobs out of range:
           each must get an HTTP 4xx naming the problem, and a normal request must succeed after
  preempt  a second server with a pool of --preempt-blocks pages: the same greedy requests run
           one at a time, then all at once (the engine preempts and recomputes: its
           aphrodite:num_preemptions counter); the outputs must be equal
Prints a table and writes one JSON object per dtype to --out (server logs beside it).

On the H200 machine: run `bash benchmarks/server_wheels.sh` here first (the server's wheels, into
.whl/), carry .gpu-bundle and .whl, then `source benchmarks/gpu_setup.sh; python3
.gpu-bundle/gpu/make_models.py /tmp/models` (the tokenizer and the hybrid's base config) before
this script. --model-config hybrid27b for the Qwen3.5-style hybrid.
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


# ---- the request plan and the checks (no server needed: aphrodite_int2kv_tests/test_benchmark_tools.py)

def soak_plan(n: int, long: int, long_len: int, seed: int = 0) -> list[dict]:
    """n completion requests: `long` of them with long_len-token prompts, spread through the run,
    the rest 16-2048 tokens; 1-128 output tokens; every other one streamed."""
    rng = random.Random(seed)
    at_long = set(rng.sample(range(n), min(long, n)))
    plan = []
    for i in range(n):
        length = long_len if i in at_long else rng.randint(16, 2048)
        plan.append(dict(id=i, prompt_len=length, max_tokens=rng.randint(1, 128), stream=i % 2 == 1,
                         seed=rng.randrange(1 << 30)))
    return plan


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


def drift(samples: list[tuple[float, float, float]], skip: float = 0.2) -> dict:
    """Memory samples (t, gpu MiB, host MiB) -> first / last / max after the first `skip` of the
    run (warm-up), and last - first."""
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
    """model_dir_for's hybrid27b: the Qwen3.5 config (a text_config with its layer types)."""
    with open(os.path.join(model_dir, "config.json")) as f:
        return "text_config" in json.load(f)


def server_command(model_dir, kv, port, max_model_len, extra=()) -> list[str]:
    """`aphrodite run` on loopback with dummy weights, no prefix caching (so freed blocks show as
    free), the attention backend eval --engine uses for the dtype (quality/engine_eval.py)."""
    from aphrodite_int2kv.quality.engine_eval import baseline_backend

    if is_hybrid(model_dir):
        extra = ["--language-model-only", "--gdn-prefill-backend", "triton", *extra]
    backend = baseline_backend(kv).get("attention_config", {}).get("backend")
    if backend:
        extra = [*extra, "--attention-backend", backend]
    exe = shutil.which("aphrodite")
    cmd = [exe] if exe else [sys.executable, "-m", "aphrodite.entrypoints.cli.main"]
    cmd += ["run", model_dir, "--host", "127.0.0.1", "--port", str(port), "--served-model-name", MODEL_NAME,
            "--load-format", "dummy", "--dtype", "bfloat16", "--kv-cache-dtype", kv,
            "--max-model-len", str(max_model_len), "--no-enable-prefix-caching", "--seed", "0", *extra]
    return cmd


class Server:
    def __init__(self, model_dir, kv, port, max_model_len, extra=(), log=None):
        self.cmd, self.port = server_command(model_dir, kv, port, max_model_len, extra), port
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

    def memory(self) -> tuple[float, float]:
        """(GPU MiB in use on the whole GPU, host RSS MiB of the server's process tree)."""
        try:
            gpu = float(subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                       capture_output=True, text=True, timeout=10).stdout.split()[0])
        except (OSError, ValueError, IndexError, subprocess.SubprocessError):
            gpu = float("nan")
        return gpu, tree_rss_mib(self.proc.pid)


def tree_rss_mib(pid: int) -> float:
    """Resident memory of a process and all its descendants (/proc), MiB."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, []))
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
        body = dict(text=choice.get("text"), finish_reason=choice.get("finish_reason"), usage=body.get("usage"))
    return status, body


def metrics(port) -> dict:
    status, text = request(port, "GET", "/metrics", timeout=30)
    return parse_metrics(text) if status == 200 else {}


def wait_idle(port, timeout=300):
    t0 = time.time()
    while time.time() - t0 < timeout:
        m = metrics(port)
        if m.get("aphrodite:num_requests_running", 1) == 0 and m.get("aphrodite:num_requests_waiting", 1) == 0:
            return m
        time.sleep(1)
    return metrics(port)


def progress(label, done, total, t0):
    print(f"\r  {label}: {done}/{total} ({time.time() - t0:.0f} s)", end="" if done < total else "\n", flush=True)


# ---- the phases

def soak(server, args):
    plan = soak_plan(args.requests, args.long, args.long_len)
    samples, stop = [], threading.Event()

    def sample():
        t0 = time.time()
        while not stop.is_set():
            samples.append((round(time.time() - t0, 1), *server.memory()))
            stop.wait(args.sample_s)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    errors, t0, done = [], time.time(), [0]

    def run(req):
        try:
            status, result = completion(server.port, req)
            why = check_completion(req, status, result)
        except Exception as exc:   # noqa: BLE001 - a failed request is a result here
            why = f"{type(exc).__name__}: {exc}"
        done[0] += 1
        if done[0] % 50 == 0 or done[0] == len(plan):
            progress("soak", done[0], len(plan), t0)
        return req["id"], why

    with ThreadPoolExecutor(args.concurrency) as pool:
        for rid, why in pool.map(run, plan):
            if why:
                errors.append((rid, why))
    stop.set()
    sampler.join()
    return dict(requests=len(plan), errors=len(errors), first_errors=errors[:10], seconds=round(time.time() - t0, 1),
                long_requests=args.long, long_len=args.long_len, concurrency=args.concurrency,
                memory=drift(samples), memory_curve=samples)


def aborts(server, args):
    before = wait_idle(server.port)
    rng = random.Random(1)
    t0, done = time.time(), [0]

    def run(i):
        if i % 2 == 0:      # mid-prefill: a long prompt, hung up before its first token
            req = dict(id=i, prompt_len=args.long_len // 2, max_tokens=64, stream=True, seed=i)
            how = ("seconds", rng.uniform(0.05, 0.5))
        else:               # mid-decode: a few streamed chunks, then gone
            req = dict(id=i, prompt_len=rng.randint(64, 2048), max_tokens=512, stream=True, seed=i)
            how = ("chunks", rng.randint(1, 8))
        try:
            request(server.port, "POST", "/v1/completions", completion_body(req), stream=True, hang_up_after=how)
        except OSError:
            pass
        done[0] += 1
        if done[0] % 50 == 0 or done[0] == args.aborts:
            progress("aborts", done[0], args.aborts, t0)

    with ThreadPoolExecutor(args.concurrency) as pool:
        list(pool.map(run, range(args.aborts)))
    after = wait_idle(server.port)
    probe = dict(id=-1, prompt_len=100, max_tokens=16, seed=5)
    status, result = completion(server.port, probe)
    key = "aphrodite:kv_cache_usage_perc"
    return dict(aborted=args.aborts, kv_usage_before=before.get(key), kv_usage_after=after.get(key),
                running_after=after.get("aphrodite:num_requests_running"),
                waiting_after=after.get("aphrodite:num_requests_waiting"),
                serves_after=check_completion(probe, status, result) or "ok", alive=server.alive())


def bad_requests(server, args):
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
        print(f"  bad request, {name}: HTTP {status} {str(message)[:120]}", flush=True)
    status, result = completion(server.port, dict(ok, id=0))
    return dict(cases=out, serves_after=check_completion(dict(ok, id=0), status, result) or "ok",
                alive=server.alive())


def preemption(model_dir, kv, args, log_dir):
    # pages of the same 128 tokens for every dtype on the dense model (int2's default there; the
    # hybrid's page size comes from its GDN alignment), so the override gives bf16 and int2 the
    # same token pool; max-model-len within it (the engine checks one request fits at start-up)
    pages = [] if is_hybrid(model_dir) else ["--block-size", "128"]
    server = Server(model_dir, kv, args.port + 1, args.preempt_max_len,
                    extra=["--num-gpu-blocks-override", str(args.preempt_blocks), *pages, *args.server_arg],
                    log=os.path.join(log_dir, f"server_{kv}_preempt.log"))
    try:
        server.wait_ready()
        plan = [dict(id=i, prompt_len=1024 + 97 * i, max_tokens=args.preempt_tokens, seed=100 + i)
                for i in range(args.preempt_requests)]
        alone = [completion(server.port, r)[1] for r in plan]
        before = metrics(server.port).get("aphrodite:num_preemptions", 0.0)
        with ThreadPoolExecutor(len(plan)) as pool:
            together = list(pool.map(lambda r: completion(server.port, r)[1], plan))
        preempted = metrics(server.port).get("aphrodite:num_preemptions", 0.0) - before
        same = [isinstance(a, dict) and isinstance(b, dict) and a.get("text") == b.get("text")
                for a, b in zip(alone, together)]
        return dict(requests=len(plan), pool_blocks=args.preempt_blocks, preemptions=preempted,
                    outputs_equal=sum(same), alive=server.alive())
    finally:
        server.stop()


def model_dir_for(name, base_dir):
    """A config.json of the named shapes (e2e_throughput.py), its vocabulary cut to the tiny
    tokenizer's model vocabulary, beside that tokenizer (make_models.py's files in base_dir)."""
    path = f"/tmp/serve-{name}"
    os.makedirs(path, exist_ok=True)
    if name == "hybrid27b":
        cfg = json.load(open(os.path.join(base_dir, "qwen35", "config.json")))
        cfg["text_config"].update(HYBRID_TEXT, vocab_size=VOCAB)
        tok_dir = os.path.join(base_dir, "qwen35")
    else:
        tok_dir = os.path.join(base_dir, "qwen3")
        tiny = json.load(open(os.path.join(tok_dir, "config.json")))     # its special tokens' ids
        cfg = dict(CONFIGS[name], vocab_size=VOCAB, bos_token_id=tiny.get("bos_token_id"),
                   eos_token_id=tiny.get("eos_token_id"))
    json.dump(cfg, open(os.path.join(path, "config.json"), "w"))
    for f in os.listdir(tok_dir):
        if f.startswith("tokenizer") or f == "special_tokens_map.json":
            shutil.copy(os.path.join(tok_dir, f), path)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-config", default="dense8b", choices=sorted(CONFIGS) + ["hybrid27b"])
    ap.add_argument("--models-dir", default="/tmp/models", help="make_models.py's output (tokenizer, hybrid config)")
    ap.add_argument("--kv", default="auto,int2", help="KV dtypes, one server each (auto = the bf16 control)")
    ap.add_argument("--phases", default="soak,aborts,bad,preempt")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--long", type=int, default=4, help="soak requests with --long-len prompts")
    ap.add_argument("--long-len", type=int, default=32768)
    ap.add_argument("--aborts", type=int, default=200)
    ap.add_argument("--max-model-len", type=int, default=40960)
    ap.add_argument("--preempt-blocks", type=int, default=64,
                    help="KV pages of the preemption phase's server (of 128 tokens on the dense model)")
    ap.add_argument("--preempt-max-len", type=int, default=4096, help="its max-model-len")
    ap.add_argument("--preempt-requests", type=int, default=12)
    ap.add_argument("--preempt-tokens", type=int, default=256)
    ap.add_argument("--sample-s", type=float, default=2.0, help="memory sampling period")
    ap.add_argument("--port", type=int, default=8011)
    ap.add_argument("--server-arg", action="append", default=[], help="extra `aphrodite run` argument (repeat)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    phases = args.phases.split(",")
    model_dir = model_dir_for(args.model_config, args.models_dir)
    log_dir = os.path.dirname(os.path.abspath(args.out))
    results = []
    for kv in args.kv.split(","):
        row = dict(model=args.model_config, kv_cache_dtype=kv, date=time.strftime("%Y-%m-%d"),
                   command=" ".join(sys.argv))
        print(f"[{kv}] starting the server", flush=True)
        if set(phases) - {"preempt"}:
            server = Server(model_dir, kv, args.port, args.max_model_len, extra=args.server_arg,
                            log=os.path.join(log_dir, f"server_{kv}.log"))
            try:
                row["ready_s"] = round(server.wait_ready(), 1)
                for name, fn in (("soak", soak), ("aborts", aborts), ("bad", bad_requests)):
                    if name in phases:
                        row[name] = fn(server, args)
                        json.dump(results + [row], open(args.out, "w"), indent=1)
            except Exception as exc:   # noqa: BLE001 - the failure is the result
                row["error"] = f"{type(exc).__name__}: {exc}"
            finally:
                server.stop()
        if "preempt" in phases:
            try:
                row["preempt"] = preemption(model_dir, kv, args, log_dir)
            except Exception as exc:   # noqa: BLE001
                row["preempt"] = dict(error=f"{type(exc).__name__}: {exc}")
        results.append(row)
        json.dump(results, open(args.out, "w"), indent=1)
    print("| kv | requests | errors | aborted | KV usage before / after | bad requests with a 4xx | "
          "preemptions | greedy outputs equal | GPU / host MiB drift |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        s, a, b, p = (r.get(k) or {} for k in ("soak", "aborts", "bad", "preempt"))
        mem = s.get("memory") or {}
        clear = sum(c["clear"] for c in (b.get("cases") or {}).values())
        print(f"| {r['kv_cache_dtype']} | {s.get('requests')} | {s.get('errors')} | {a.get('aborted')} | "
              f"{a.get('kv_usage_before')} / {a.get('kv_usage_after')} | {clear} of {len(b.get('cases') or {})} | "
              f"{p.get('preemptions')} | {p.get('outputs_equal')} of {p.get('requests')} | "
              f"{mem.get('gpu_mib_drift')} / {mem.get('host_mib_drift')} |" + (f" error: {r['error']}" if r.get("error") else ""))


if __name__ == "__main__":
    main()
