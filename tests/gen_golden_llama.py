#!/usr/bin/python3
"""Golden values for tests/test_llama.c: a Llama (Hugging Face LlamaForCausalLM semantics) in plain PyTorch,
float64 throughout, independent of fsc and of transformers.

The model, written out here in a few lines as transformers' modeling_llama.py computes it:
  RMSNorm(x) = w * x / sqrt(mean(x^2) + eps)
  rotary: inv_freq = theta^(-arange(0, hd, 2) / hd), freqs = outer(positions 0..T-1, inv_freq),
          emb = cat(freqs, freqs), x * cos(emb) + rotate_half(x) * sin(emb), rotate_half(x) = cat(-x2, x1)
  attention: q, k, v = n W^T (no bias), rotary on q and k, k and v repeated per group (repeat_kv: query head h
          reads kv head h // (heads / kv_heads)), causal softmax(q k^T / sqrt(hd)) v, o_proj
  MLP: down(silu(gate(n)) * up(n));  decoder layer: h = x + attn(input_layernorm(x)),
          out = h + mlp(post_attention_layernorm(h));  head: logits = lm_head(norm(x)), mean cross entropy.
Everything runs in float64 (transformers computes the rotary angles in float32; fsc in double).

Writes
  tests/golden/llama_init.safetensors  the initial weights (F32, Hugging Face names), written with struct + json
  tests/golden/llama_golden.h          the configuration, the tokens, the loss and the weights after one SGD step
Not run by the test suite (Debian's python3-torch is needed); run it by hand if the golden files must change:
    /usr/bin/python3 tests/gen_golden_llama.py tests/golden
"""
import json
import math
import struct
import sys

import torch

L, C, NH, KVH, F, T, V, B = 2, 16, 4, 2, 32, 8, 32, 2
THETA, EPS, LR = 10000.0, 1e-5, 0.5
HD = C // NH


def tokens():
    """The batch, a rule the C test implements too."""
    tok = [[(7 * b + 3 * t + 1) % V for t in range(T)] for b in range(B)]
    tgt = [[(5 * b + 11 * t + 2) % V for t in range(T)] for b in range(B)]
    return tok, tgt


def tensor_specs():
    """(name, shape, kind) in fsc's tensor order (llama.h)."""
    specs = [("model.embed_tokens.weight", [V, C], "w")]
    for i in range(L):
        p = "model.layers.%d." % i
        specs += [(p + "self_attn.q_proj.weight", [NH * HD, C], "w"), (p + "self_attn.k_proj.weight", [KVH * HD, C], "w"),
                  (p + "self_attn.v_proj.weight", [KVH * HD, C], "w"), (p + "self_attn.o_proj.weight", [C, NH * HD], "w"),
                  (p + "mlp.gate_proj.weight", [F, C], "w"), (p + "mlp.up_proj.weight", [F, C], "w"),
                  (p + "mlp.down_proj.weight", [C, F], "w"), (p + "input_layernorm.weight", [C], "n"),
                  (p + "post_attention_layernorm.weight", [C], "n")]
    specs += [("model.norm.weight", [C], "n"), ("lm_head.weight", [V, C], "w")]
    return specs


def initial_weights(specs):
    """Linears and the embedding N(0, 0.1), norms 1 + N(0, 0.1) (so their gradients matter), rounded to float32."""
    g = torch.Generator().manual_seed(1234)
    out = {}
    for name, shape, kind in specs:
        x = torch.randn(shape, generator=g, dtype=torch.float64) * 0.1
        if kind == "n":
            x = x + 1.0
        out[name] = x.to(torch.float32).to(torch.float64)
    return out


def rmsnorm(x, w):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_cos_sin():
    inv_freq = 1.0 / (THETA ** (torch.arange(0, HD, 2, dtype=torch.float64) / HD))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)  # (T, HD)
    return emb.cos(), emb.sin()


def attention(x, W, p):
    q = (x @ W[p + "self_attn.q_proj.weight"].T).view(B, T, NH, HD).transpose(1, 2)
    k = (x @ W[p + "self_attn.k_proj.weight"].T).view(B, T, KVH, HD).transpose(1, 2)
    v = (x @ W[p + "self_attn.v_proj.weight"].T).view(B, T, KVH, HD).transpose(1, 2)
    cos, sin = rope_cos_sin()
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    rep = NH // KVH
    k = k[:, :, None].expand(B, KVH, rep, T, HD).reshape(B, NH, T, HD)  # repeat_kv
    v = v[:, :, None].expand(B, KVH, rep, T, HD).reshape(B, NH, T, HD)
    att = q @ k.transpose(2, 3) / math.sqrt(HD)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, NH * HD)
    return y @ W[p + "self_attn.o_proj.weight"].T


def mlp(x, W, p):
    gate = torch.nn.functional.silu(x @ W[p + "mlp.gate_proj.weight"].T)
    return (gate * (x @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T


def loss_of(W, tok, tgt):
    x = W["model.embed_tokens.weight"][torch.tensor(tok)]  # (B, T, C)
    for i in range(L):
        p = "model.layers.%d." % i
        h = x + attention(rmsnorm(x, W[p + "input_layernorm.weight"]), W, p)
        x = h + mlp(rmsnorm(h, W[p + "post_attention_layernorm.weight"]), W, p)
    logits = rmsnorm(x, W["model.norm.weight"]) @ W["lm_head.weight"].T
    return torch.nn.functional.cross_entropy(logits.reshape(B * T, V), torch.tensor(tgt).reshape(B * T))


def write_safetensors(path, specs, W):
    header = {"__metadata__": {"format": "pt", "source": "gen_golden_llama.py"}}
    data = b""
    for name, shape, _ in specs:
        raw = b"".join(struct.pack("<f", v) for v in W[name].reshape(-1).tolist())
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "tests/golden"
    specs = tensor_specs()
    W = initial_weights(specs)
    for w in W.values():
        w.requires_grad_(True)
    tok, tgt = tokens()
    loss = loss_of(W, tok, tgt)
    loss.backward()
    write_safetensors(outdir + "/llama_init.safetensors", specs, W)
    lines = ["/* Generated by tests/gen_golden_llama.py with PyTorch %s (float64). Do not edit. */" % torch.__version__,
             "#define LG_LAYERS %d" % L, "#define LG_DIM %d" % C, "#define LG_HEADS %d" % NH, "#define LG_KV_HEADS %d" % KVH,
             "#define LG_FFN %d" % F, "#define LG_SEQ %d" % T, "#define LG_VOCAB %d" % V, "#define LG_BATCH %d" % B,
             "#define LG_THETA %r" % THETA, "#define LG_EPS %r" % EPS, "#define LG_LR %r" % LR,
             "static const double lg_loss = %.17g;" % loss.item(),
             "/* every tensor after one SGD step (w - lr grad), in fsc's tensor order */",
             "static const double lg_after[] = {"]
    n = 0
    for name, _, _ in specs:
        after = (W[name] - LR * W[name].grad).detach().reshape(-1).tolist()
        lines.append("    /* %s */" % name)
        for i in range(0, len(after), 4):
            lines.append("    " + ", ".join("%.17g" % v for v in after[i:i + 4]) + ",")
        n += len(after)
    lines += ["};", "#define LG_PARAMS %d" % n]
    with open(outdir + "/llama_golden.h", "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
