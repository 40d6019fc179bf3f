#!/usr/bin/python3
"""The baseline for make bench: bench_llama's Llama in PyTorch (CPU, float32), the same batch and steps.

Llama (Hugging Face LlamaForCausalLM semantics, written out in plain torch as tests/gen_golden_llama.py does):
token embedding, 4 pre-RMSNorm decoder layers (eps 1e-5; attention with 4 query heads and 2 key/value heads,
rotary embeddings theta 10000 on q and k with rotate_half, repeat_kv; SwiGLU MLP down(silu(gate(x)) * up(x))
768 wide), final RMSNorm, untied lm_head; no biases; width 256, context 128, batch 8, vocabulary 256.
Initial weights N(0, 0.02), norms 1, as fsc. AdamW (lr 1e-3, no weight decay), gradient clipping at norm 1, as
bench_llama, on bench_llama's tokens (its LCG, a fresh random batch per step), 2 warm-up and 10 measured steps.
Attention is the plain masked softmax product, as bench/torch_gpt.py (Debian's torch 1.13 has no
scaled_dot_product_attention). Prints tokens/s (median over the measured steps) for torch.set_num_threads(1)
and (2), each in its own process, and the BLAS threads OpenBLAS had (torch.set_num_threads does not reach it).
Usage: torch_llama.py [--threads N] [--steps N] [--warmup N]
"""
import argparse
import subprocess
import sys

sys.dont_write_bytecode = True  # no bench/__pycache__ from the import below
from torch_gpt import train_and_report  # noqa: E402

L, C, NH, KVH, T, B, V = 4, 256, 4, 2, 128, 8, 256
F = (8 * C // 3 + 255) // 256 * 256  # Llama's ffn rule, fsc_llama_default_ffn: 768
HD = C // NH
THETA, EPS = 10000.0, 1e-5


def build_model(torch):
    nn = torch.nn
    Fn = torch.nn.functional

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(C))

        def forward(self, x):
            return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS))

    def rotate_half(x):
        return torch.cat((-x[..., HD // 2:], x[..., : HD // 2]), dim=-1)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = RMSNorm()
            self.q_proj = nn.Linear(C, NH * HD, bias=False)
            self.k_proj = nn.Linear(C, KVH * HD, bias=False)
            self.v_proj = nn.Linear(C, KVH * HD, bias=False)
            self.o_proj = nn.Linear(NH * HD, C, bias=False)
            self.post_attention_layernorm = RMSNorm()
            self.gate_proj = nn.Linear(C, F, bias=False)
            self.up_proj = nn.Linear(C, F, bias=False)
            self.down_proj = nn.Linear(F, C, bias=False)

        def forward(self, x, cos, sin, mask):
            b, t, _ = x.shape
            n = self.input_layernorm(x)
            q = self.q_proj(n).view(b, t, NH, HD).transpose(1, 2)
            k = self.k_proj(n).view(b, t, KVH, HD).transpose(1, 2)
            v = self.v_proj(n).view(b, t, KVH, HD).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            rep = NH // KVH  # repeat_kv: query head h reads kv head h // rep
            k = k[:, :, None].expand(b, KVH, rep, t, HD).reshape(b, NH, t, HD)
            v = v[:, :, None].expand(b, KVH, rep, t, HD).reshape(b, NH, t, HD)
            att = (q @ k.transpose(2, 3)) * (1.0 / HD ** 0.5)
            att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
            h = x + self.o_proj((att @ v).transpose(1, 2).reshape(b, t, NH * HD))
            n = self.post_attention_layernorm(h)
            return h + self.down_proj(Fn.silu(self.gate_proj(n)) * self.up_proj(n))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(V, C)
            self.layers = nn.ModuleList([Layer() for _ in range(L)])
            self.norm = RMSNorm()
            self.lm_head = nn.Linear(C, V, bias=False)  # untied
            inv_freq = 1.0 / (THETA ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD))
            emb = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)
            emb = torch.cat((emb, emb), dim=-1)  # (T, HD), float32 angles as transformers
            self.register_buffer("cos", emb.cos())
            self.register_buffer("sin", emb.sin())
            self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1))

        def forward(self, idx, targets):
            t = idx.shape[1]
            x = self.embed_tokens(idx)
            cos, sin, mask = self.cos[:t], self.sin[:t], self.mask[:t, :t]
            for layer in self.layers:
                x = layer(x, cos, sin, mask)
            logits = self.lm_head(self.norm(x))
            return Fn.cross_entropy(logits.view(-1, V), targets.view(-1))

    torch.manual_seed(1)
    model = Llama()
    for name, p in model.named_parameters():  # fsc_llama_init_values: matrices N(0, 0.02), norms 1
        if p.dim() == 1:
            torch.nn.init.ones_(p)
        else:
            torch.nn.init.normal_(p, 0.0, 0.02)
    return model


def lcg_batches(n_steps):
    """bench_llama's tokens and targets: its LCG x = x * 1664525 + 1013904223, the top byte, interleaved."""
    x, out = 12345, []
    for _ in range(n_steps):
        tok, tgt = [], []
        for _ in range(B * T):
            x = (x * 1664525 + 1013904223) & 0xFFFFFFFF
            tok.append(x >> 24)
            x = (x * 1664525 + 1013904223) & 0xFFFFFFFF
            tgt.append(x >> 24)
        out.append((tok, tgt))
    return out


def run(threads, steps, warmup):
    import torch
    torch.set_num_threads(threads)
    batches = [(torch.tensor(a).view(B, T) % V, torch.tensor(b).view(B, T) % V) for a, b in lcg_batches(warmup + steps)]
    train_and_report(torch, build_model(torch), batches, warmup, threads, " llama", "torch_llama")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=0, help="one run with this many threads (0: 1 and 2)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()
    if a.threads > 0:
        run(a.threads, a.steps, a.warmup)
        return
    for t in (1, 2):
        subprocess.run([sys.executable, __file__, "--threads", str(t), "--steps", str(a.steps),
                        "--warmup", str(a.warmup)], check=True)


if __name__ == "__main__":
    main()
