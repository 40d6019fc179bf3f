#!/usr/bin/python3
"""PyTorch's side of the GPU speed comparison (ci/gpu_check.sh): the same model shapes fsc-train trains, on the
same card, in the same call, so that tokens/s and MFU stand side by side.

Models as fsc builds them: GPT-2 (learned positions, pre-LayerNorm blocks with biases, tanh GELU MLP of 4x
width, head tied to the token embedding) and Llama (RMSNorm, rotary embeddings, grouped-query attention,
SwiGLU MLP, no biases, untied head). Mixed precision as fsc's --precision bf16: fp32 master parameters and
AdamW state, the forward and backward in bf16 (torch.autocast), attention through scaled_dot_product_attention
(flash attention on Hopper: what a PyTorch user gets by default). Random tokens from a fixed seed.
Prints one JSON line: tokens/s and ms/step (medians over the measured steps, after --warmup steps, each timed
with torch.cuda.synchronize), parameters, peak GPU memory, the first and last loss.
Usage: torch_gpu.py --model gpt2|llama --layers L --dim C --heads H [--kv-heads K] [--ffn F] --vocab V
                    --seq T --batch B [--steps N] [--warmup W] [--compile]
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class GPTBlock(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.H, c // self.H).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(a.vocab, a.dim), nn.Embedding(a.seq, a.dim)
        self.h = nn.ModuleList(GPTBlock(a.dim, a.heads) for _ in range(a.layers))
        self.ln_f = nn.LayerNorm(a.dim)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.h:
            x = blk(x)
        return self.ln_f(x) @ self.wte.weight.t()


def rope(x, cos, sin):  # x: (B, H, T, D), rotating pairs (i, i + D/2) as Hugging Face's Llama does
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, a):
        super().__init__()
        C, self.H, self.K, self.D = a.dim, a.heads, a.kv_heads, a.dim // a.heads
        self.attn_norm, self.mlp_norm = nn.RMSNorm(C, eps=1e-5), nn.RMSNorm(C, eps=1e-5)
        self.q = nn.Linear(C, self.H * self.D, bias=False)
        self.k = nn.Linear(C, self.K * self.D, bias=False)
        self.v = nn.Linear(C, self.K * self.D, bias=False)
        self.o = nn.Linear(self.H * self.D, C, bias=False)
        self.gate, self.up = nn.Linear(C, a.ffn, bias=False), nn.Linear(C, a.ffn, bias=False)
        self.down = nn.Linear(a.ffn, C, bias=False)

    def forward(self, x, cos, sin):
        b, t, c = x.shape
        h = self.attn_norm(x)
        q = rope(self.q(h).view(b, t, self.H, self.D).transpose(1, 2), cos, sin)
        k = rope(self.k(h).view(b, t, self.K, self.D).transpose(1, 2), cos, sin)
        v = self.v(h).view(b, t, self.K, self.D).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.K != self.H)
        x = x + self.o(y.transpose(1, 2).reshape(b, t, c))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed = nn.Embedding(a.vocab, a.dim)
        self.layers = nn.ModuleList(LlamaBlock(a) for _ in range(a.layers))
        self.norm = nn.RMSNorm(a.dim, eps=1e-5)
        self.head = nn.Linear(a.dim, a.vocab, bias=False)
        D = a.dim // a.heads
        inv = 1.0 / (10000.0 ** (torch.arange(0, D, 2).float() / D))
        ang = torch.outer(torch.arange(a.seq).float(), inv)
        # (T, D/2): rope() rotates the pairs (i, i + D/2) by angle i of the position
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def forward(self, idx):
        x = self.embed(idx)
        t = idx.shape[1]
        for blk in self.layers:
            x = blk(x, self.cos[:t], self.sin[:t])
        return self.head(self.norm(x))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["gpt2", "llama"], required=True)
    for name in ("layers", "dim", "heads", "vocab", "seq", "batch"):
        p.add_argument("--" + name, type=int, required=True)
    p.add_argument("--kv-heads", type=int, default=0)
    p.add_argument("--ffn", type=int, default=0)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--compile", action="store_true")
    a = p.parse_args()
    a.kv_heads = a.kv_heads or a.heads
    a.ffn = a.ffn or 4 * a.dim
    torch.manual_seed(1)
    dev = torch.device("cuda")
    model = (GPT(a) if a.model == "gpt2" else Llama(a)).to(dev)
    # GPT-2's initialization (as fsc's): weights N(0, 0.02), biases zero, norms one; PyTorch's defaults
    # (embedding N(0, 1)) start the loss near 480 instead of ln(vocab)
    for mod in model.modules():
        if isinstance(mod, (nn.Linear, nn.Embedding)):
            nn.init.normal_(mod.weight, std=0.02)
        if isinstance(mod, nn.Linear) and mod.bias is not None:
            nn.init.zeros_(mod.bias)
    nparams = sum(t.numel() for t in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0, fused=True)
    fwd = torch.compile(model) if a.compile else model
    g = torch.Generator(device=dev).manual_seed(1)
    tokens = torch.randint(0, a.vocab, (a.steps + a.warmup, a.batch, a.seq + 1), device=dev, generator=g)
    losses, times = [], []
    for s in range(a.warmup + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        x, y = tokens[s, :, :-1], tokens[s, :, 1:]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = fwd(x)
        loss = F.cross_entropy(logits.float().view(-1, a.vocab), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    ms = 1e3 * statistics.median(times)
    print(json.dumps({"impl": "torch-compile" if a.compile else "torch-eager", "torch": torch.__version__,
                      "gpu": torch.cuda.get_device_name(), "params": nparams, "ms_per_step": ms,
                      "tokens_per_s": a.batch * a.seq / (ms / 1e3), "peak_bytes": torch.cuda.max_memory_allocated(),
                      "loss_first": losses[0], "loss_last": losses[-1],
                      "finite": all(math.isfinite(v) for v in losses)}))


if __name__ == "__main__":
    main()
