#!/usr/bin/env python3
"""Measure one GPU through PyTorch and write capsim's raw calibration format.

For machines where PyTorch is installed but capsim-calibrate cannot be built. Writes
capsim-calibration-raw/1 lines (docs/calibration.md) for:

  clock    sustained bf16 GEMM load (8192^3) for --burn seconds while nvidia-smi samples the
           SM clock, power and temperature (smi.csv beside the output): the clock a long
           training or serving run settles at, against the rated boost clock;
  gemm     cuBLASLt through torch: bf16 (F.linear) and per-tensor FP8 (torch._scaled_mm, bf16
           out) on the projection shapes of Llama-3 8B (TP1) and 70B (TP2, TP4) from 1 to 8192
           rows, weights rotated over copies larger than L2 so every call reads its weights
           from memory, as a model's layers do;
  decode   one query token per sequence over a contiguous KV cache (32 query / 8 KV heads,
           head dim 128, bf16), 1 to 256 sequences of 1K to 8K keys, through the
           FlashAttention-2 kernel PyTorch carries (impl "flash2") and cuDNN (impl "cudnn");
  attention  training attention forward and backward, causal and not, 32 heads of 128,
           1K to 128K tokens (32K tokens a call where the length allows), same two kernels;
  memory   device-to-device copies of 64 MiB to 4 GiB;
  grouped  MoE expert GEMMs (torch._grouped_mm in bf16, torch._scaled_grouped_mm in row-scaled
           FP8, a per-expert F.linear loop) on the expert shapes of Qwen3-30B-A3B, Qwen3-235B-A22B,
           DeepSeek-V3 and Mixtral-8x7B, 1 to 4096 rows an expert;
  decode-step  a whole Llama-3-8B-shaped decode step in one CUDA graph, 1 to 256 sequences,
           each kernel's time from the profiler (a JSON file beside the output).

Short kernels are captured in a CUDA graph of many calls (rotating inputs) and timed by
replaying it with events, so launch overhead stays out and only the gaps of graph replay
remain; `time_s` is the median per-call time over replays. Where the profiler works,
`cupti_kernel_s` is the summed device time of the call's kernels from CUPTI (through
torch.profiler). Long kernels (training attention) are timed with events around each call.

Usage: python3 calibrate/torch_probe.py -o OUT.jsonl [--budget SECONDS] [--burn SECONDS]
The output is rewritten atomically after each group. Groups run in the order above and
the run stops starting new measurements once --budget seconds have passed.
"""
import argparse
import datetime
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:  # older torch
    SDPBackend = None

L2_ROTATE_BYTES = 256 * 2**20  # rotate inputs over at least this many bytes (H100/H200 L2: 50/60 MB)


def now_utc():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Writer:
    def __init__(self, path, header):
        self.path = path
        self.lines = [header]

    def add(self, line):
        self.lines.append(line)

    def flush(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            for line in self.lines:
                f.write(json.dumps(line, sort_keys=True) + "\n")
        os.replace(tmp, self.path)


def write_json(path, obj):
    """Write `obj` to `path` atomically (a temporary file beside it, then a rename)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def smi(query):
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=" + query, "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip()
    except Exception as e:  # noqa: BLE001 - a missing nvidia-smi is a note, not a failure
        return "n/a (%s)" % e


def percentile(xs, q):
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))]


def cupti_kernel_seconds(run, calls):
    """Summed device time of every kernel `run()` launches, per call, from torch.profiler."""
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run()
            torch.cuda.synchronize()
        total_us = 0.0
        for e in prof.key_averages():
            t = getattr(e, "self_device_time_total", None)
            if t is None:
                t = getattr(e, "self_cuda_time_total", 0.0)
            total_us += t
        return total_us * 1e-6 / calls if total_us > 0 else None
    except Exception:  # noqa: BLE001
        return None


def kernel_times(run, reps, log, what):
    """Each kernel's device time per run of `run`, summed by name over `reps` runs under the
    profiler: {name: {"us_per_step", "calls_per_step"}} (empty where the profiler fails)."""
    kernels = {}
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                run()
            torch.cuda.synchronize()
        for e in prof.key_averages():
            t = getattr(e, "self_device_time_total", 0.0)
            if t > 0:
                kernels[e.key] = {"us_per_step": t / reps, "calls_per_step": e.count / reps}
    except Exception as e:  # noqa: BLE001
        log("%s profile: %s" % (what, str(e).splitlines()[0][:160]))
    return kernels


def time_graph(calls, replays=7, cupti=True):
    """Capture `calls` (callables) into one CUDA graph; median per-call seconds over replays."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for c in calls[: min(3, len(calls))]:
            c()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for c in calls:
            c()
    per_call = [t / len(calls) for t in time_events(g.replay, replays)]
    kernels = cupti_kernel_seconds(g.replay, len(calls)) if cupti else None
    del g
    return per_call, kernels


def elapsed(fn):
    """Seconds of device time `fn` takes on the current stream, between two events."""
    a = torch.cuda.Event(enable_timing=True)
    b = torch.cuda.Event(enable_timing=True)
    a.record()
    fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) * 1e-3


def time_events(fn, reps):
    fn()
    torch.cuda.synchronize()
    return [elapsed(fn) for _ in range(reps)]


def stats_fields(ts):
    return {"time_s": statistics.median(ts), "p10_s": percentile(ts, 0.1), "p90_s": percentile(ts, 0.9),
            "repeats": len(ts)}


def burn(seconds, writer, log, dtype="bf16"):
    """Sustained 8192^3 GEMMs (bf16, or per-tensor FP8 with bf16 output); per-batch TFLOP/s,
    with nvidia-smi sampling beside it."""
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    if dtype == "fp8":
        one = torch.ones((), device="cuda", dtype=torch.float32)
        a8, b8 = a.to(torch.float8_e4m3fn), b.t().contiguous().to(torch.float8_e4m3fn).t()

        def mm():
            return torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    else:
        def mm():
            return torch.matmul(a, b)
    flops = 2.0 * n ** 3
    mm()
    torch.cuda.synchronize()
    log("burn %s from %.3f (epoch s)" % (dtype, time.time()))
    rates = []
    t_end = time.time() + seconds
    def batch():
        for _ in range(50):
            mm()

    while time.time() < t_end:
        rates.append(50 * flops / elapsed(batch))
    half = rates[len(rates) // 2:]
    t = [flops / r for r in half]
    writer.add(dict(kind="gemm", dtype=dtype, m=n, n=n, k=n, flops=flops, sustained_s=seconds,
                    **stats_fields(t)))
    log("burn %s: %d batches of 50, first %.0f TFLOP/s, second half median %.0f TFLOP/s, until %.3f" %
        (dtype, len(rates), rates[0] / 1e12, statistics.median(half) / 1e12, time.time()))


GEMM_SHAPES = [  # (N, K, what): weight N x K, activations M x K
    (6144, 4096, "llama3-8b qkv tp1"), (4096, 4096, "llama3-8b o tp1"),
    (28672, 4096, "llama3-8b gate_up tp1"), (4096, 14336, "llama3-8b down tp1"),
    (5120, 8192, "llama3-70b qkv tp2"), (8192, 4096, "llama3-70b o tp2"),
    (28672, 8192, "llama3-70b gate_up tp2"), (8192, 14336, "llama3-70b down tp2"),
    (2560, 8192, "llama3-70b qkv tp4"), (8192, 2048, "llama3-70b o tp4"),
    (14336, 8192, "llama3-70b gate_up tp4"), (8192, 7168, "llama3-70b down tp4"),
]
GEMM_ROWS = [1, 16, 32, 64, 96, 128, 192, 256, 384, 512, 1024, 2048, 4096, 8192]
# A second set for checking a model on shapes it was not shaped on: DeepSeek-V3's MLA
# projections (TP1 and TP8), narrow and wide dense projections, and finer rows up to 1024.
GEMM_SHAPES_MORE = [
    (2112, 7168, "deepseek-v3 q_a+kv_a down"), (24576, 1536, "deepseek-v3 q_b tp1"),
    (3072, 1536, "deepseek-v3 q_b tp8"), (4096, 512, "deepseek-v3 kv_b tp8"),
    (7168, 2048, "deepseek-v3 o tp8"), (1024, 4096, "narrow 1024x4096"), (2048, 4096, "narrow 2048x4096"),
    (3072, 4096, "narrow 3072x4096"), (5120, 5120, "square 5120"), (10240, 5120, "qwen-32b-like qkv tp1"),
    (5120, 13824, "down 5120x13824"), (57344, 8192, "llama3-70b gate_up tp1"), (8192, 28672, "llama3-70b down tp1"),
    (1536, 8192, "narrow 1536x8192"),
]
GEMM_ROWS_MORE = [1, 8, 24, 48, 80, 112, 160, 224, 320, 448, 640, 768, 1024]


def gemms(writer, log, deadline, shapes=None, rows=None):
    fp8 = getattr(torch, "float8_e4m3fn", None)
    for n, k, what in shapes or GEMM_SHAPES:
        for dtype in ("bf16", "fp8"):
            if time.time() > deadline:
                return
            if dtype == "fp8" and fp8 is None:
                continue
            elt = 2 if dtype == "bf16" else 1
            copies = max(2, min(64, math.ceil(L2_ROTATE_BYTES / (n * k * elt))))
            ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.05 for _ in range(copies)]
            if dtype == "fp8":
                ws = [w.to(fp8) for w in ws]
            one = torch.ones((), device="cuda", dtype=torch.float32)
            for m in rows or GEMM_ROWS:
                if time.time() > deadline:
                    break
                try:
                    xs_n = max(2, min(16, math.ceil(L2_ROTATE_BYTES / 4 / (m * k * elt))))
                    xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(xs_n)]
                    if dtype == "fp8":
                        xs = [x.to(fp8) for x in xs]
                    flops = 2.0 * m * n * k
                    # enough calls for ~2 ms of work at 500 TFLOP/s, at least one pass over the copies
                    calls_n = max(copies, min(512, int(math.ceil(2e-3 / max(flops / 5e14, 3e-6)))))
                    calls = []
                    for i in range(calls_n):
                        w = ws[i % copies]
                        x = xs[i % xs_n]
                        if dtype == "bf16":
                            calls.append(lambda x=x, w=w: F.linear(x, w))
                        else:
                            calls.append(lambda x=x, w=w: torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one,
                                                                           out_dtype=torch.bfloat16))
                    ts, cupti = time_graph(calls, cupti=False)
                    line = dict(kind="gemm", dtype=dtype, m=m, n=n, k=k, flops=flops, shape=what, **stats_fields(ts))
                    if cupti:
                        line["cupti_kernel_s"] = cupti
                    writer.add(line)
                except Exception as e:  # noqa: BLE001
                    log("gemm %s m=%d n=%d k=%d: %s" % (dtype, m, n, k, str(e).splitlines()[0][:200]))
                finally:
                    xs = None
            ws = None
            torch.cuda.empty_cache()
        writer.flush()
        log("gemm %s done" % what)


def backends():
    if SDPBackend is None:
        return []
    return [("flash2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]


def decode(writer, log, deadline):
    hq, d = 32, 128
    for impl, be in backends():
        hkv, gqa = 8, True
        for s in (1024, 2048, 4096, 8192):
            for b in (1, 4, 16, 32, 64, 128, 256):
                if time.time() > deadline:
                    return
                try:
                    kv_bytes = 2 * b * hkv * s * d * 2
                    copies = max(2, min(64, math.ceil(L2_ROTATE_BYTES / kv_bytes)))
                    qs = [torch.randn(b, hq, 1, d, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
                    ks = [torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
                    vs = [torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
                    calls_n = max(copies, 32)
                    calls = []
                    for i in range(calls_n):
                        j = i % copies

                        def call(j=j):
                            with sdpa_kernel(be):
                                return F.scaled_dot_product_attention(qs[j], ks[j], vs[j], enable_gqa=gqa)
                        calls.append(call)
                    try:
                        ts, cupti = time_graph(calls)
                    except Exception as e:  # noqa: BLE001
                        if not gqa:
                            raise
                        # no grouped-query support in this kernel: K and V repeated to the query heads
                        log("decode %s: no GQA (%s); K and V repeated to %d heads" %
                            (impl, str(e).splitlines()[0][:120], hq))
                        gqa, hkv = False, hq
                        ks = [x.repeat_interleave(hq // 8, dim=1) for x in ks]
                        vs = [x.repeat_interleave(hq // 8, dim=1) for x in vs]
                        kv_bytes = 2 * b * hkv * s * d * 2
                        ts, cupti = time_graph(calls)
                    flops = 4.0 * b * hq * s * d
                    line = dict(kind="attention", **{"pass": "fwd"}, causal=False, batch=b, heads=hq, kv_heads=hkv,
                                head_dim=d, seq_q=1, seq_kv=s, dtype="bf16", flops=flops, impl=impl,
                                kv_bytes=kv_bytes, **stats_fields(ts))
                    if cupti:
                        line["cupti_kernel_s"] = cupti
                    writer.add(line)
                except Exception as e:  # noqa: BLE001
                    log("decode %s b=%d s=%d: %s" % (impl, b, s, str(e).splitlines()[0][:200]))
                finally:
                    qs = ks = vs = None
                    torch.cuda.empty_cache()
        writer.flush()
        log("decode %s done" % impl)


def attention(writer, log, deadline):
    h, d = 32, 128
    tokens = 32768
    for impl, be in backends():
        for s in (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072):
            for causal in (True, False):
                if s == 131072 and not causal:
                    continue
                if time.time() > deadline:
                    return
                b = max(1, tokens // s)
                try:
                    q = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                    k = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                    v = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                    go = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
                    flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
                    reps = 3 if s >= 32768 else 5
                    with sdpa_kernel(be):
                        def fwd():
                            with torch.no_grad():
                                F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        ts = time_events(fwd, reps)
                        writer.add(dict(kind="attention", **{"pass": "fwd"}, causal=causal, batch=b, heads=h,
                                        kv_heads=h, head_dim=d, seq_q=s, seq_kv=s, dtype="bf16", flops=flops,
                                        impl=impl, **stats_fields(ts)))
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                        def bwd():
                            torch.autograd.grad(o, (q, k, v), go, retain_graph=True)
                        ts = time_events(bwd, reps)
                        writer.add(dict(kind="attention", **{"pass": "bwd"}, causal=causal, batch=b, heads=h,
                                        kv_heads=h, head_dim=d, seq_q=s, seq_kv=s, dtype="bf16",
                                        flops=2.5 * flops, impl=impl, **stats_fields(ts)))
                except Exception as e:  # noqa: BLE001
                    log("attention %s s=%d causal=%s: %s" % (impl, s, causal, str(e).splitlines()[0][:200]))
                finally:
                    q = k = v = go = o = None
                    torch.cuda.empty_cache()
            writer.flush()
        log("attention %s done" % impl)


def kernel_names(out_path, log):
    """Which kernels one call launches (names from CUPTI through torch.profiler): the tile shape
    and split-K choice of cuBLASLt's GEMMs, the split of the decode attention kernel."""
    from torch.profiler import ProfilerActivity, profile
    fp8 = getattr(torch, "float8_e4m3fn", None)
    one = torch.ones((), device="cuda", dtype=torch.float32)
    cases = []
    for dt in ("bf16", "fp8"):
        for n, k in ((4096, 4096), (4096, 14336), (28672, 4096), (8192, 2048), (4096, 512)):
            for m in (1, 16, 64, 128, 256, 512, 1024, 4096):
                cases.append(("gemm", dt, m, n, k))
    for b in (1, 16, 32, 128):
        cases.append(("decode", "bf16", b, 4096, 0))
    result = []
    for kind, dt, m, n, k in cases:
        try:
            if kind == "gemm":
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
                if dt == "fp8":
                    x, w = x.to(fp8), w.to(fp8)
                    fn = lambda: torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
                else:
                    fn = lambda: F.linear(x, w)
            else:
                q = torch.randn(m, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
                kk = torch.randn(m, 8, n, 128, device="cuda", dtype=torch.bfloat16)
                vv = torch.randn(m, 8, n, 128, device="cuda", dtype=torch.bfloat16)

                def fn():
                    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                        return F.scaled_dot_product_attention(q, kk, vv, enable_gqa=True)
            fn()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                fn()
                torch.cuda.synchronize()
            names = sorted({e.key for e in prof.key_averages() if getattr(e, "self_device_time_total", 0) > 0})
            result.append({"kind": kind, "dtype": dt, "m": m, "n": n, "k": k, "kernels": names})
        except Exception as e:  # noqa: BLE001
            log("names %s %s m=%d n=%d k=%d: %s" % (kind, dt, m, n, k, str(e).splitlines()[0][:160]))
    write_json(out_path, result)
    log("kernel names: %d cases to %s" % (len(result), out_path))


class Fp8Linear(torch.autograd.Function):
    """y = x W^T with both operands cast to FP8 with one dynamic scale a tensor (the
    tensorwise recipe of torchao's Float8Linear): e4m3 inputs and weights, e5m2 output
    gradients, the three GEMMs through torch._scaled_mm (bf16 out), the operands transposed
    where cuBLASLt's FP8 layout asks for it."""

    @staticmethod
    def forward(ctx, x, w):
        x2 = x.reshape(-1, x.shape[-1])
        sx = (x2.abs().amax().float() / 448.0).clamp(min=1e-12)
        sw = (w.abs().amax().float() / 448.0).clamp(min=1e-12)
        x8 = (x2 / sx).to(torch.float8_e4m3fn)
        w8 = (w / sw).to(torch.float8_e4m3fn)
        y = torch._scaled_mm(x8, w8.t(), scale_a=sx, scale_b=sw, out_dtype=torch.bfloat16, use_fast_accum=True)
        ctx.save_for_backward(x8, w8, sx, sw)
        ctx.shape = x.shape
        return y.view(*x.shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, gy):
        x8, w8, sx, sw = ctx.saved_tensors
        g2 = gy.reshape(-1, gy.shape[-1])
        sg = (g2.abs().amax().float() / 57344.0).clamp(min=1e-12)
        g8 = (g2 / sg).to(torch.float8_e5m2)
        # input gradient [T, K] = dY [T, N] W [N, K]; weight gradient [N, K] = dY^T [N, T] X [T, K]
        dx = torch._scaled_mm(g8, w8.t().contiguous().t(), scale_a=sg, scale_b=sw, out_dtype=torch.bfloat16)
        dw = torch._scaled_mm(g8.t().contiguous(), x8.t().contiguous().t(), scale_a=sg, scale_b=sx,
                              out_dtype=torch.bfloat16)
        return dx.view(ctx.shape), dw


LLAMA8B_LAYER = dict(h=4096, heads=32, kvh=8, ffn=14336)


def llama_layers(layers, dtype):
    """`layers` Llama-3-8B-shaped layers (hidden 4096, 32 heads, 8 KV heads, SwiGLU 14336,
    bf16 weights, causal SDPA over one sequence of however many tokens the input has); with
    dtype "fp8" the four projections run their three GEMMs in FP8 (Fp8Linear). Returns the
    model and its FLOPs for a sequence of T tokens: 6 x parameters x T for the matrices and
    3 x 2 x 2 x T^2/2 x hidden a layer for causal attention."""
    h, heads, kvh, ffn = (LLAMA8B_LAYER[k] for k in ("h", "heads", "kvh", "ffn"))
    hd = h // heads

    def linear(mod, x):
        return Fp8Linear.apply(x, mod.weight) if dtype == "fp8" else mod(x)

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.n1 = torch.nn.RMSNorm(h)
            self.qkv = torch.nn.Linear(h, (heads + 2 * kvh) * hd, bias=False)
            self.o = torch.nn.Linear(h, h, bias=False)
            self.n2 = torch.nn.RMSNorm(h)
            self.gu = torch.nn.Linear(h, 2 * ffn, bias=False)
            self.d = torch.nn.Linear(ffn, h, bias=False)

        def forward(self, x):
            t = x.shape[1]
            q, k, v = linear(self.qkv, self.n1(x)).split([heads * hd, kvh * hd, kvh * hd], dim=-1)
            q = q.view(1, t, heads, hd).transpose(1, 2)
            k = k.view(1, t, kvh, hd).transpose(1, 2)
            v = v.view(1, t, kvh, hd).transpose(1, 2)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            x = x + linear(self.o, a.transpose(1, 2).reshape(1, t, h))
            g, u = linear(self.gu, self.n2(x)).chunk(2, dim=-1)
            return x + linear(self.d, F.silu(g) * u)

    model = torch.nn.Sequential(*[Layer() for _ in range(layers)]).cuda().to(torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    return model, lambda tokens: 6.0 * params * tokens + layers * 6.0 * tokens * tokens * h


def train_clock(seconds, out_path, log, dtype="bf16"):
    """A training-like load: forward, backward and AdamW over eight Llama-3-8B-shaped layers
    (llama_layers, one 8192-token sequence) for `seconds`, each step timed with events, so
    that the clock the GPU settles at under a mixed compute/memory load can be read beside
    nvidia-smi's samples. With dtype "fp8" the projections run in FP8, as an FP8 training run
    does: the clock its FP8 tensor cores settle at inside a step, not in a back-to-back burn."""
    torch.manual_seed(0)
    layers, tokens = 8, 8192
    model, flops_of = llama_layers(layers, dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    x = torch.randn(1, tokens, LLAMA8B_LAYER["h"], device="cuda", dtype=torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    flops = flops_of(tokens)
    steps = []
    t_end = time.time() + seconds
    def step():
        model(x).float().square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    while time.time() < t_end:
        steps.append({"wall": time.time(), "step_s": elapsed(step)})
    rates = [flops / st["step_s"] / 1e12 for st in steps]
    half = rates[len(rates) // 2:]
    # Where a step's device time goes: three steps under the profiler, kernels summed by name.
    kernels = kernel_times(step, 3, log, "train-clock")
    write_json(out_path, {"params": params, "tokens": tokens, "flops_per_step": flops, "dtype": dtype,
                          "steps": steps, "kernels": kernels})
    log("train-clock %s: %d steps, first %.0f TFLOP/s, second half median %.0f TFLOP/s (model FLOPs)" %
        (dtype, len(steps), rates[0], statistics.median(half)))


def train_host(out_path, log, deadline):
    """Where an eager training step stops being bound by the GPU: the eight-layer loop of
    train_clock (bf16, then FP8) at 256 to 8,192 tokens a step, each case for about two
    seconds. Per case: the median step between two events (device time, idle gaps included),
    the host time the Python call takes to enqueue the step (forward, backward, AdamW,
    without the final synchronisation) and the summed kernel time from the profiler. Where
    the step's time stays put as the tokens shrink, the host sets it: that floor over the
    layers is an eager framework's host time a layer."""
    result = {"layers": 8, "layer": LLAMA8B_LAYER, "cases": []}
    for dtype in ("bf16", "fp8"):
        try:
            torch.manual_seed(0)
            model, flops_of = llama_layers(8, dtype)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
            for tokens in (256, 512, 1024, 2048, 4096, 8192):
                if time.time() > deadline:
                    break
                x = torch.randn(1, tokens, LLAMA8B_LAYER["h"], device="cuda", dtype=torch.bfloat16)

                def step():
                    model(x).float().square().mean().backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)

                for _ in range(3):
                    step()
                torch.cuda.synchronize()
                device, host = [], []
                t_end = time.time() + 2.0
                while time.time() < t_end:
                    a = torch.cuda.Event(enable_timing=True)
                    b = torch.cuda.Event(enable_timing=True)
                    a.record()
                    t0 = time.perf_counter()
                    step()
                    host.append(time.perf_counter() - t0)
                    b.record()
                    b.synchronize()
                    device.append(a.elapsed_time(b) * 1e-3)
                kernels = kernel_times(step, 3, log, "train-host")
                busy = sum(k["us_per_step"] for k in kernels.values()) * 1e-6
                result["cases"].append({"dtype": dtype, "tokens": tokens, "flops_per_step": flops_of(tokens),
                                        "steps": len(device), "step_s": statistics.median(device),
                                        "host_s": statistics.median(host), "kernel_s": busy,
                                        "kernels_per_step": sum(k["calls_per_step"] for k in kernels.values())})
                log("train-host %s %d tokens: step %.2f ms, host %.2f ms, kernels %.2f ms" %
                    (dtype, tokens, statistics.median(device) * 1e3, statistics.median(host) * 1e3, busy * 1e3))
                x = None
        except Exception as ex:  # noqa: BLE001
            log("train-host %s: %s" % (dtype, str(ex).splitlines()[0][:200]))
        finally:
            model = opt = None
            torch.cuda.empty_cache()
        write_json(out_path, result)
    log("train-host: %d cases to %s" % (len(result["cases"]), out_path))


def small_kernels(out_path, log):
    """Back-to-back small memory-bound kernels in a CUDA graph, as a decode step runs its norms,
    activations and residual adds: per call, graph replay time (kernel plus the gap to the
    next) and CUPTI kernel time, by rows of a 4096- or 8192-wide hidden state."""
    result = []
    for hidden in (4096, 8192):
        for rows in (1, 8, 32, 128, 512, 2048):
            xs = [torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16) for _ in range(8)]
            w = torch.randn(hidden, device="cuda", dtype=torch.bfloat16)
            ops = {
                "tiny_add (one element)": lambda i: xs[i % 8][:1, :1].add_(1.0),
                "rms_norm": lambda i: F.rms_norm(xs[i % 8], (hidden,), w, 1e-5),
                "silu": lambda i: F.silu(xs[i % 8]),
                "add": lambda i: xs[i % 8] + xs[(i + 1) % 8],
            }
            for name, op in ops.items():
                try:
                    calls = [(lambda i=i, op=op: op(i)) for i in range(64)]
                    ts, cupti = time_graph(calls)
                    result.append({"op": name, "rows": rows, "hidden": hidden, "bytes_in": rows * hidden * 2,
                                   "time_s": statistics.median(ts), "cupti_kernel_s": cupti})
                except Exception as e:  # noqa: BLE001
                    log("small %s rows=%d: %s" % (name, rows, str(e).splitlines()[0][:160]))
    write_json(out_path, result)
    log("small kernels: %d cases to %s" % (len(result), out_path))


def memory(writer, log, deadline):
    for mib in (64, 256, 1024, 4096):
        if time.time() > deadline:
            return
        n = mib * 2**20
        src = torch.empty(n, device="cuda", dtype=torch.uint8).random_(0, 255)
        dst = torch.empty_like(src)
        ts = time_events(lambda: dst.copy_(src), 10)
        writer.add(dict(kind="memory", op="copy", bytes=2.0 * n, **stats_fields(ts)))
        src = dst = None
        torch.cuda.empty_cache()
    writer.flush()
    log("memory done")


# Expert GEMMs of MoE layers: (what, local experts, N, K) for the weight N x K of each expert;
# gate_up is the fused gate and up projection, down the down projection. Shapes from the
# models' Hugging Face configs (data/models/): Qwen3-30B-A3B (128 experts, hidden 2048,
# moe_intermediate 768), Qwen3-235B-A22B (128, 4096, 1536), DeepSeek-V3 (256, 7168, 2048),
# Mixtral-8x7B (8, 4096, 14336); "epN" holds E/N experts of full shape a GPU, "tp8" all
# experts with the intermediate split 8 ways.
GROUPED_SHAPES = [
    ("qwen3-30b-a3b ep1 gate_up", 128, 1536, 2048), ("qwen3-30b-a3b ep1 down", 128, 2048, 768),
    ("qwen3-30b-a3b ep8 gate_up", 16, 1536, 2048), ("qwen3-30b-a3b ep8 down", 16, 2048, 768),
    ("qwen3-235b-a22b tp8 gate_up", 128, 384, 4096), ("qwen3-235b-a22b tp8 down", 128, 4096, 192),
    ("qwen3-235b-a22b ep8 gate_up", 16, 3072, 4096), ("qwen3-235b-a22b ep8 down", 16, 4096, 1536),
    ("deepseek-v3 ep64 gate_up", 4, 4096, 7168), ("deepseek-v3 ep64 down", 4, 7168, 2048),
    ("deepseek-v3 ep8 gate_up", 32, 4096, 7168), ("deepseek-v3 ep8 down", 32, 7168, 2048),
    ("mixtral-8x7b ep1 gate_up", 8, 28672, 4096), ("mixtral-8x7b ep1 down", 8, 4096, 14336),
]
GROUPED_ROWS = [1, 4, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]


def grouped(writer, log, deadline):
    """Grouped expert GEMMs, every expert given the same rows: PyTorch's grouped matmul
    (torch._grouped_mm, bf16; CUTLASS on sm90), its row-wise scaled FP8 form
    (torch._scaled_grouped_mm, bf16 out), and, for up to 32 experts in bf16, one F.linear
    per expert back to back on one stream (how a per-expert cuBLAS loop runs). Lines are
    kind "gemm" with `groups` (experts) and `m` = rows an expert."""
    fp8 = getattr(torch, "float8_e4m3fn", None)
    for what, e, n, k in GROUPED_SHAPES:
        for impl in ("grouped_mm", "scaled_grouped_mm", "per_expert_loop"):
            if time.time() > deadline:
                return
            if impl == "scaled_grouped_mm" and (fp8 is None or not hasattr(torch, "_scaled_grouped_mm")):
                continue
            if impl == "grouped_mm" and not hasattr(torch, "_grouped_mm"):
                continue
            if impl == "per_expert_loop" and e > 32:
                continue
            dtype = "fp8" if impl == "scaled_grouped_mm" else "bf16"
            elt = 1 if dtype == "fp8" else 2
            copies = max(2, min(16, math.ceil(L2_ROTATE_BYTES / (e * n * k * elt))))
            try:
                ws = [torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16) * 0.05 for _ in range(copies)]
                if dtype == "fp8":
                    ws = [w.to(fp8) for w in ws]
                sb = torch.ones(e, n, device="cuda", dtype=torch.float32)
            except Exception as ex:  # noqa: BLE001
                log("grouped %s %s: %s" % (what, impl, str(ex).splitlines()[0][:200]))
                continue
            for m in GROUPED_ROWS:
                if time.time() > deadline:
                    break
                rows = e * m
                flops = 2.0 * rows * n * k
                if flops > 4e12 or rows * (n + k) * 2 > 8 * 2**30:
                    continue
                if impl == "per_expert_loop" and m not in (1, 16, 128, 512, 2048):
                    continue
                xs = None
                try:
                    xs_n = max(2, min(8, math.ceil(L2_ROTATE_BYTES / 4 / (rows * k * elt))))
                    xs = [torch.randn(rows, k, device="cuda", dtype=torch.bfloat16) for _ in range(xs_n)]
                    if dtype == "fp8":
                        xs = [x.to(fp8) for x in xs]
                    offs = torch.arange(m, rows + 1, m, device="cuda", dtype=torch.int32)
                    sa = torch.ones(rows, device="cuda", dtype=torch.float32)
                    calls_n = max(copies, min(256, int(math.ceil(2e-3 / max(flops / 5e14, 5e-6)))))
                    calls = []
                    for i in range(calls_n):
                        w, x = ws[i % copies], xs[i % xs_n]
                        if impl == "grouped_mm":
                            calls.append(lambda x=x, w=w: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs,
                                                                            out_dtype=torch.bfloat16))
                        elif impl == "scaled_grouped_mm":
                            calls.append(lambda x=x, w=w: torch._scaled_grouped_mm(
                                x, w.transpose(-2, -1), sa, sb, offs=offs, out_dtype=torch.bfloat16,
                                use_fast_accum=True))
                        else:
                            def loop(x=x, w=w):
                                for j in range(e):
                                    F.linear(x[j * m:(j + 1) * m], w[j])
                            calls.append(loop)
                    ts, cupti = time_graph(calls, cupti=False)
                    writer.add(dict(kind="gemm", dtype=dtype, m=m, n=n, k=k, groups=e, flops=flops, impl=impl,
                                    shape=what, **stats_fields(ts)))
                except Exception as ex:  # noqa: BLE001
                    log("grouped %s %s m=%d: %s" % (what, impl, m, str(ex).splitlines()[0][:200]))
                finally:
                    xs = None
            ws = None
            torch.cuda.empty_cache()
            writer.flush()
        log("grouped %s done" % what)


def decode_step(out_path, log, deadline):
    """One decode step of a Llama-3-8B-shaped model (32 layers, hidden 4096, 32 query / 8 KV
    heads of 128, SwiGLU 14336, vocabulary 128256, bf16) over B sequences of L cached tokens,
    captured whole in a CUDA graph and replayed: RMSNorm, the fused QKV projection, a rotary
    stand-in (one multiply on q and k), the new key and value written into a contiguous
    cache, SDPA decode attention (PyTorch's FlashAttention-2 kernel where it takes the
    shape, else cuDNN's or the memory-efficient one: the kernel names say), the output projection
    and residual add, RMSNorm, the fused gate/up projection, SiLU x up, the down projection
    and residual add; then the final norm and the LM head on every sequence. Per case: the
    replay time and, from the profiler, each kernel's device time summed by name."""
    torch.manual_seed(0)
    h, hq, hkv, d, ffn, layers, vocab = 4096, 32, 8, 128, 14336, 32, 128256
    dev, bf = "cuda", torch.bfloat16
    W = [dict(qkv=torch.randn((hq + 2 * hkv) * d, h, device=dev, dtype=bf) * 0.02,
              o=torch.randn(h, hq * d, device=dev, dtype=bf) * 0.02,
              gu=torch.randn(2 * ffn, h, device=dev, dtype=bf) * 0.02,
              dn=torch.randn(h, ffn, device=dev, dtype=bf) * 0.02,
              n1=torch.ones(h, device=dev, dtype=bf), n2=torch.ones(h, device=dev, dtype=bf)) for _ in range(layers)]
    head = torch.randn(vocab, h, device=dev, dtype=bf) * 0.02
    nf = torch.ones(h, device=dev, dtype=bf)
    cases = [(1, 1024), (1, 4096), (8, 1024), (8, 4096), (32, 1024), (32, 2048), (64, 1024), (64, 2048),
             (128, 512), (128, 1024), (256, 512), (256, 1024)]
    result = {"model": "llama-3-8b shapes", "layers": layers, "hidden": h, "heads": hq, "kv_heads": hkv,
              "head_dim": d, "ffn": ffn, "vocab": vocab, "dtype": "bf16", "attention": "flash2 (SDPA)",
              "weight_bytes": 2.0 * (layers * ((hq + 2 * hkv) * d * h + h * hq * d + 2 * ffn * h + h * ffn)
                                     + vocab * h), "cases": []}
    for b, L in cases:
        if time.time() > deadline:
            break
        try:
            kc = torch.randn(layers, b, hkv, L + 1, d, device=dev, dtype=bf)
            vc = torch.randn(layers, b, hkv, L + 1, d, device=dev, dtype=bf)
            rot = torch.randn(b, 1, d, device=dev, dtype=bf)
            x0 = torch.randn(b, h, device=dev, dtype=bf)

            def step():
                x = x0
                for i, w in enumerate(W):
                    y = F.rms_norm(x, (h,), w["n1"], 1e-5)
                    q, k, v = F.linear(y, w["qkv"]).split([hq * d, hkv * d, hkv * d], dim=-1)
                    q = q.view(b, hq, 1, d) * rot.unsqueeze(1)
                    k = k.view(b, hkv, 1, d) * rot.unsqueeze(1)
                    kc[i, :, :, L:L + 1].copy_(k)
                    vc[i, :, :, L:L + 1].copy_(v.view(b, hkv, 1, d))
                    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION,
                                      SDPBackend.EFFICIENT_ATTENTION]):
                        a = F.scaled_dot_product_attention(q, kc[i], vc[i], enable_gqa=True)
                    x = x + F.linear(a.reshape(b, hq * d), w["o"])
                    y = F.rms_norm(x, (h,), w["n2"], 1e-5)
                    g, u = F.linear(y, w["gu"]).chunk(2, dim=-1)
                    x = x + F.linear(F.silu(g) * u, w["dn"])
                return F.linear(F.rms_norm(x, (h,), nf, 1e-5), head)

            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                step()
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                step()
            ts = time_events(g.replay, 15)
            kernels = kernel_times(g.replay, 3, log, "decode-step")
            result["cases"].append({"batch": b, "context": L, "kv_bytes": 2.0 * layers * b * hkv * L * d * 2,
                                    **stats_fields(ts), "kernels": kernels})
            log("decode-step b=%d L=%d: %.3f ms" % (b, L, statistics.median(ts) * 1e3))
            del g
        except Exception as ex:  # noqa: BLE001
            log("decode-step b=%d L=%d: %s" % (b, L, str(ex).splitlines()[0][:200]))
        finally:
            kc = vc = None
            torch.cuda.empty_cache()
        write_json(out_path, result)
    log("decode-step: %d cases to %s" % (len(result["cases"]), out_path))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--budget", type=float, default=330.0, help="seconds after which no new measurement starts")
    ap.add_argument("--burn", type=float, default=20.0, help="seconds of sustained GEMM load for the clock reading")
    ap.add_argument("--only", default="clock,gemm,decode,attention,memory",
                    help="groups to run: clock, clock-fp8, train-clock, train-clock-fp8, train-host, small, names, decode-step, gemm, gemm-more, grouped, decode, "
                         "attention, memory")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_probe: no CUDA device visible", file=sys.stderr)
        return 3
    start = time.time()
    deadline = start + args.budget
    torch.backends.cuda.matmul.allow_tf32 = False

    def log(msg):
        print("[%6.1f s] %s" % (time.time() - start, msg), flush=True)

    header = {"schema": "capsim-calibration-raw/1", "kind": "header", "source": "torch_probe.py",
              "host": socket.gethostname(), "gpu": torch.cuda.get_device_name(0), "gpu_count": 1,
              "driver": smi("driver_version"), "cuda_runtime": torch.version.cuda or "",
              "cudnn": str(torch.backends.cudnn.version()), "created": now_utc(), "torch": torch.__version__,
              "rated_max_sm_clock_mhz": smi("clocks.max.sm"), "power_limit_w": smi("power.limit")}
    writer = Writer(args.out, header)
    writer.flush()
    log("gpu %s, torch %s, cuda %s, cudnn %s" % (header["gpu"], torch.__version__, header["cuda_runtime"],
                                                 header["cudnn"]))
    only = set(args.only.split(","))
    if "clock" in only:
        burn(args.burn, writer, log)
        writer.flush()
    if "clock-fp8" in only:
        burn(args.burn, writer, log, "fp8")
        writer.flush()
    def gemms_more(w, lg, dl):
        gemms(w, lg, dl, GEMM_SHAPES_MORE, GEMM_ROWS_MORE)

    if "train-clock" in only:
        train_clock(args.burn, os.path.splitext(args.out)[0] + "-train-clock.json", log)
    if "train-host" in only:
        train_host(os.path.splitext(args.out)[0] + "-train-host.json", log, deadline)
    if "train-clock-fp8" in only:
        try:
            train_clock(args.burn, os.path.splitext(args.out)[0] + "-train-clock-fp8.json", log, "fp8")
        except Exception as ex:  # noqa: BLE001
            log("train-clock fp8: %s" % str(ex).splitlines()[0][:200])
    if "small" in only:
        small_kernels(os.path.splitext(args.out)[0] + "-small.json", log)
    if "names" in only:
        kernel_names(os.path.splitext(args.out)[0] + "-kernels.json", log)
    if "decode-step" in only:
        decode_step(os.path.splitext(args.out)[0] + "-decode-step.json", log, deadline)
    for name, fn in (("gemm", gemms), ("gemm-more", gemms_more), ("grouped", grouped), ("decode", decode),
                     ("attention", attention), ("memory", memory)):
        if name in only and time.time() < deadline:
            fn(writer, log, deadline)
            writer.flush()
    log("wrote %d measurements to %s" % (len(writer.lines) - 1, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
