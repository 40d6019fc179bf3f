#!/usr/bin/python3
"""The baseline for make bench: bench_gpt's GPT in PyTorch (CPU, float32), the same batch and steps.

GPT-2 architecture: token + position embeddings, 4 pre-LayerNorm blocks (causal self-attention with 4 heads,
MLP with 4x expansion and tanh GELU), final LayerNorm, head tied to the token embedding; width 256, context
128, batch 8, byte vocabulary. AdamW (lr 1e-3), gradient clipping at norm 1, as bench_gpt.
Prints tokens/s (median over the measured steps) for torch.set_num_threads(1) and (2), each in its own process.
torch.set_num_threads does not reach the BLAS: Debian's torch calls OpenBLAS (libblas.so.3), whose own thread
pool keeps its default (all cores, or OPENBLAS_NUM_THREADS), so each run also prints the BLAS threads it had.
Usage: torch_gpt.py [--threads N] [--steps N] [--warmup N] [--data PATH]
"""
import argparse
import math
import os
import statistics
import subprocess
import sys
import time

L, C, H, T, B, V = 4, 256, 4, 128, 8, 256


def build_model(torch):
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(C)
            self.c_attn = nn.Linear(C, 3 * C)
            self.c_proj = nn.Linear(C, C)
            self.ln_2 = nn.LayerNorm(C)
            self.c_fc = nn.Linear(C, 4 * C)
            self.mlp_proj = nn.Linear(4 * C, C)
            self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q = q.view(b, t, H, c // H).transpose(1, 2)
            k = k.view(b, t, H, c // H).transpose(1, 2)
            v = v.view(b, t, H, c // H).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // H))
            att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
            x = x + self.c_proj(y)
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, C)
            self.wpe = nn.Embedding(T, C)
            self.h = nn.ModuleList([Block() for _ in range(L)])
            self.ln_f = nn.LayerNorm(C)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for blk in self.h:
                x = blk(x)
            logits = self.ln_f(x) @ self.wte.weight.t()  # tied head
            return F.cross_entropy(logits.view(-1, V), targets.view(-1))

    torch.manual_seed(1)
    model = GPT()
    for name, p in model.named_parameters():  # GPT-2 init, as fsc: N(0, 0.02), residual projections scaled
        if name.endswith("bias"):
            torch.nn.init.zeros_(p)
        elif "ln" in name:
            torch.nn.init.ones_(p)
        else:
            std = 0.02 / math.sqrt(2 * L) if name.endswith("c_proj.weight") or name.endswith("mlp_proj.weight") else 0.02
            torch.nn.init.normal_(p, 0.0, std)
    return model


def blas_threads():
    """OpenBLAS's thread count in this process, or '?' when the BLAS is not OpenBLAS."""
    import ctypes
    try:
        libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if "blas" in l.lower() and "/" in l})
    except OSError:
        return "?"
    for path in libs:
        try:
            return str(ctypes.CDLL(path).openblas_get_num_threads())
        except (OSError, AttributeError):
            continue
    return "?"


def run(threads, steps, warmup, data_path):
    import torch
    torch.set_num_threads(threads)
    try:
        data = open(data_path, "rb").read(1 << 20)  # bench_gpt reads the first MiB
    except OSError:
        data = b""
    if len(data) < 4096:  # no corpus: bench_gpt's deterministic bytes (its LCG, the top byte)
        x, out = 12345, bytearray(1 << 20)
        for i in range(len(out)):
            x = (x * 1664525 + 1013904223) & 0xFFFFFFFF
            out[i] = x >> 24
        data = bytes(out)
    data = torch.tensor(list(data), dtype=torch.long) % V
    n = data.numel()
    def batch(step):
        starts = [((step * B + i) * T) % (n - T) for i in range(B)]  # the trainer's data order
        return (torch.stack([data[s:s + T] for s in starts]), torch.stack([data[s + 1:s + T + 1] for s in starts]))
    train_and_report(torch, build_model(torch), [batch(s) for s in range(warmup + steps)], warmup, threads, "",
                     "torch")


def train_and_report(torch, model, batches, warmup, threads, what, tag):
    """AdamW (lr 1e-3) with clipping at 1 over the (inputs, targets) batches, timing each step; prints the median
    over the steps after `warmup` and a RESULT line (shared by torch_gpt.py and torch_llama.py)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    times = []
    for step, (x, y) in enumerate(batches):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        if step >= warmup:
            times.append(dt)
    med = statistics.median(times)
    params = sum(p.numel() for p in model.parameters())
    tokens = batches[0][0].numel()
    nb = blas_threads()
    print("torch %s%s, %d threads (OpenBLAS %s threads): %d params, loss %.4f, median %.1f ms/step, %.0f tokens/s"
          % (torch.__version__, what, threads, nb, params, loss.item(), med * 1e3, tokens / med))
    print("RESULT %s threads %d tokens_per_s %.1f blas_threads %s" % (tag, threads, tokens / med, nb))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=0, help="one run with this many threads (0: 1 and 2)")
    ap.add_argument("--steps", type=int, default=15)  # bench_gpt's 15 measured steps after 3 warm-up
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "examples", "data",
                                                   "coriolanus.txt"))
    a = ap.parse_args()
    if a.threads > 0:
        run(a.threads, a.steps, a.warmup, a.data)
        return
    for t in (1, 2):
        subprocess.run([sys.executable, __file__, "--threads", str(t), "--steps", str(a.steps),
                        "--warmup", str(a.warmup), "--data", a.data], check=True)


if __name__ == "__main__":
    main()
