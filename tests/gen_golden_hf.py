#!/usr/bin/python3
"""Golden files for tests/test_safetensors_weights.c (loading Hugging Face weights files) and, through
tests/gen_golden_sample.py, tests/test_sample.c: a tiny GPT-2 and a tiny Llama in plain PyTorch (float64),
independent of fsc, their weights saved as the state dicts of transformers' GPT2LMHeadModel and
LlamaForCausalLM name them.

transformers and the safetensors package are not installed here (Debian's python3-torch only), so the models
are written out as transformers' modeling_gpt2.py / modeling_llama.py compute them, and the files are written
with struct + json (the format is an 8-byte little-endian header length, a JSON header, the data):
  GPT-2: x = wte[tok] + wpe[pos]; per block h = x + attn(ln_1(x)), x = h + mlp(ln_2(h)) with Conv1D weights
         [in, out], causal softmax(q k^T / sqrt(hd)), gelu (tanh); logits = ln_f(x) wte^T (lm_head tied).
         State dict: transformer.wte.weight ... transformer.ln_f.bias, the causal-mask buffers
         transformer.h.{i}.attn.bias (1, 1, T, T) as older transformers saved them, lm_head.weight (= wte).
  Llama: tests/gen_golden_llama.py's model (RMSNorm, rotary, grouped-query attention, SwiGLU), state dict
         model.embed_tokens.weight ... model.norm.weight, lm_head.weight (untied), and the rotary buffers
         model.layers.{i}.self_attn.rotary_emb.inv_freq older transformers saved.
Files (tests/golden/):
  hf_gpt2.safetensors, hf_gpt2_f16.safetensors, hf_gpt2_bf16.safetensors      the GPT-2 in F32, F16, BF16
  hf_llama.safetensors, hf_llama_bf16.safetensors, hf_llama_f16.safetensors    the Llama in F32, BF16, F16
  hf_golden.h   the configurations, the batch, and for each file the loss PyTorch computes with the file's
                values (rounded to its dtype) and each tensor's sum (float64, element order) of those values
Not run by the test suite; run it by hand if the golden files must change:
    /usr/bin/python3 tests/gen_golden_hf.py tests/golden
"""
import json
import math
import struct
import sys

import torch

B = 2
GPT = dict(layers=2, dim=16, heads=4, seq=8, vocab=32)
LLAMA = dict(layers=2, dim=16, heads=4, kv_heads=2, ffn=32, seq=8, vocab=32, theta=10000.0, eps=1e-5)
STD = 0.3  # large enough that greedy choices are far from ties (gen_golden_sample.py checks the margins)


def tokens(V, T):
    """The batch, a rule the C test implements too."""
    tok = [[(7 * b + 3 * t + 1) % V for t in range(T)] for b in range(B)]
    tgt = [[(5 * b + 11 * t + 2) % V for t in range(T)] for b in range(B)]
    return tok, tgt


# ---- GPT-2 --------------------------------------------------------------------------------------------------
def gpt_specs(c):
    """(fsc name, shape, kind) in fsc's tensor order (gpt.h); kind w weight, b bias, n norm weight."""
    C, L = c["dim"], c["layers"]
    s = [("wte.weight", [c["vocab"], C], "w"), ("wpe.weight", [c["seq"], C], "w")]
    for i in range(L):
        p = "h.%d." % i
        s += [(p + "ln_1.weight", [C], "n"), (p + "ln_1.bias", [C], "b"), (p + "attn.c_attn.weight", [C, 3 * C], "w"),
              (p + "attn.c_attn.bias", [3 * C], "b"), (p + "attn.c_proj.weight", [C, C], "w"),
              (p + "attn.c_proj.bias", [C], "b"), (p + "ln_2.weight", [C], "n"), (p + "ln_2.bias", [C], "b"),
              (p + "mlp.c_fc.weight", [C, 4 * C], "w"), (p + "mlp.c_fc.bias", [4 * C], "b"),
              (p + "mlp.c_proj.weight", [4 * C, C], "w"), (p + "mlp.c_proj.bias", [C], "b")]
    s += [("ln_f.weight", [C], "n"), ("ln_f.bias", [C], "b")]
    return s


def gpt_logits(W, c, tok):
    C, NH, L = c["dim"], c["heads"], c["layers"]
    Bn, T = len(tok), len(tok[0])
    HD = C // NH
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (C,), W[p + ".weight"], W[p + ".bias"], 1e-5)
    x = W["wte.weight"][torch.tensor(tok)] + W["wpe.weight"][:T]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    for i in range(L):
        p = "h.%d." % i
        qkv = ln(x, p + "ln_1") @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]
        q, k, v = [t.view(Bn, T, NH, HD).transpose(1, 2) for t in qkv.split(C, dim=2)]
        att = (q @ k.transpose(2, 3) / math.sqrt(HD)).masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(Bn, T, C)
        h = x + y @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
        m = torch.nn.functional.gelu(ln(h, p + "ln_2") @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"],
                                     approximate="tanh")
        x = h + m @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
    return ln(x, "ln_f") @ W["wte.weight"].T


def gpt_state_dict(W, c):
    """GPT2LMHeadModel's state dict: the base model under transformer., its mask buffers, the tied lm_head."""
    T = c["seq"]
    sd = []
    for name, _, _ in gpt_specs(c):
        sd.append(("transformer." + name, W[name]))
        if name.endswith("attn.c_proj.bias"):  # after the block's attention, as the module order puts it
            blk = name.split(".")[1]
            sd.append(("transformer.h.%s.attn.bias" % blk,
                       torch.tril(torch.ones(T, T, dtype=torch.float64)).view(1, 1, T, T)))
    sd.append(("lm_head.weight", W["wte.weight"]))
    return sd


# ---- Llama --------------------------------------------------------------------------------------------------
def llama_specs(c):
    C, L, NH, KVH, F, V = c["dim"], c["layers"], c["heads"], c["kv_heads"], c["ffn"], c["vocab"]
    HD = C // NH
    s = [("model.embed_tokens.weight", [V, C], "w")]
    for i in range(L):
        p = "model.layers.%d." % i
        s += [(p + "self_attn.q_proj.weight", [NH * HD, C], "w"), (p + "self_attn.k_proj.weight", [KVH * HD, C], "w"),
              (p + "self_attn.v_proj.weight", [KVH * HD, C], "w"), (p + "self_attn.o_proj.weight", [C, NH * HD], "w"),
              (p + "mlp.gate_proj.weight", [F, C], "w"), (p + "mlp.up_proj.weight", [F, C], "w"),
              (p + "mlp.down_proj.weight", [C, F], "w"), (p + "input_layernorm.weight", [C], "n"),
              (p + "post_attention_layernorm.weight", [C], "n")]
    s += [("model.norm.weight", [C], "n"), ("lm_head.weight", [V, C], "w")]
    return s


def llama_logits(W, c, tok):
    C, NH, KVH, L, eps, theta = c["dim"], c["heads"], c["kv_heads"], c["layers"], c["eps"], c["theta"]
    Bn, T = len(tok), len(tok[0])
    HD = C // NH
    rms = lambda x, w: w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
    inv_freq = 1.0 / (theta ** (torch.arange(0, HD, 2, dtype=torch.float64) / HD))
    emb = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((emb, emb), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    rot = lambda x: torch.cat((-x[..., HD // 2:], x[..., :HD // 2]), dim=-1)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    x = W["model.embed_tokens.weight"][torch.tensor(tok)]
    for i in range(L):
        p = "model.layers.%d." % i
        n1 = rms(x, W[p + "input_layernorm.weight"])
        q = (n1 @ W[p + "self_attn.q_proj.weight"].T).view(Bn, T, NH, HD).transpose(1, 2)
        k = (n1 @ W[p + "self_attn.k_proj.weight"].T).view(Bn, T, KVH, HD).transpose(1, 2)
        v = (n1 @ W[p + "self_attn.v_proj.weight"].T).view(Bn, T, KVH, HD).transpose(1, 2)
        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        rep = NH // KVH
        k = k[:, :, None].expand(Bn, KVH, rep, T, HD).reshape(Bn, NH, T, HD)
        v = v[:, :, None].expand(Bn, KVH, rep, T, HD).reshape(Bn, NH, T, HD)
        att = (q @ k.transpose(2, 3) / math.sqrt(HD)).masked_fill(mask, float("-inf")).softmax(dim=-1)
        h = x + (att @ v).transpose(1, 2).reshape(Bn, T, C) @ W[p + "self_attn.o_proj.weight"].T
        n2 = rms(h, W[p + "post_attention_layernorm.weight"])
        gate = torch.nn.functional.silu(n2 @ W[p + "mlp.gate_proj.weight"].T)
        x = h + (gate * (n2 @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
    return rms(x, W["model.norm.weight"]) @ W["lm_head.weight"].T


def llama_state_dict(W, c):
    HD = c["dim"] // c["heads"]
    sd = []
    for name, _, _ in llama_specs(c):
        sd.append((name, W[name]))
        if name.endswith("self_attn.o_proj.weight"):
            p = name[: -len("o_proj.weight")]
            inv = 1.0 / (c["theta"] ** (torch.arange(0, HD, 2, dtype=torch.float64) / HD))
            sd.append((p + "rotary_emb.inv_freq", inv))
    return sd


# ---- common -------------------------------------------------------------------------------------------------
def weights(specs, seed):
    """Weights N(0, STD), biases N(0, STD / 3), norms 1 + N(0, STD / 3), rounded to float32."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape, kind in specs:
        x = torch.randn(shape, generator=g, dtype=torch.float64) * (STD if kind == "w" else STD / 3)
        if kind == "n":
            x = x + 1.0
        out[name] = x.to(torch.float32).to(torch.float64)
    return out


TORCH_DT = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def rounded(W, dt):
    return {k: v.to(TORCH_DT[dt]).to(torch.float64) for k, v in W.items()}


def raw(t, dt):
    t = t.detach().reshape(-1)
    if dt == "F32":
        return b"".join(struct.pack("<f", v) for v in t.tolist())
    if dt == "F16":
        return b"".join(struct.pack("<e", v) for v in t.to(torch.float16).to(torch.float64).tolist())
    bits = t.to(torch.bfloat16).to(torch.float32).view(torch.int32).tolist()  # bf16 = the top 16 bits
    return b"".join(struct.pack("<H", (b >> 16) & 0xFFFF) for b in bits)


def write_safetensors(path, sd, dt, meta=None):
    header = {"__metadata__": dict({"format": "pt"}, **(meta or {}))}
    data = b""
    for name, t in sd:
        r = raw(t, dt)
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [len(data), len(data) + len(r)]}
        data += r
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def loss(logits, tgt):
    V = logits.shape[-1]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), torch.tensor(tgt).reshape(-1)).item()


def gpt_weights():
    return weights(gpt_specs(GPT), 4321)


def llama_weights():
    return weights(llama_specs(LLAMA), 8765)


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "tests/golden"
    lines = ["/* Generated by tests/gen_golden_hf.py with PyTorch %s (float64). Do not edit. */" % torch.__version__,
             "#define HG_BATCH %d" % B]
    for k, v in GPT.items():
        lines.append("#define HG_GPT_%s %d" % (k.upper(), v))
    for k, v in LLAMA.items():
        lines.append("#define HG_LLAMA_%s %r" % (k.upper(), v))
    for fam, specs, W, logits_of, sd_of, c, dts in (
            ("gpt2", gpt_specs(GPT), gpt_weights(), gpt_logits, gpt_state_dict, GPT, ("F32", "F16", "BF16")),
            ("llama", llama_specs(LLAMA), llama_weights(), llama_logits, llama_state_dict, LLAMA, ("F32", "BF16", "F16"))):
        tok, tgt = tokens(c["vocab"], c["seq"])
        for dt in dts:
            Wr = rounded(W, dt)
            suffix = "" if dt == "F32" else "_" + dt.lower()
            write_safetensors("%s/hf_%s%s.safetensors" % (outdir, fam, suffix), sd_of(Wr, c), dt)
            tag = "%s_%s" % (fam, dt.lower())
            lines.append("static const double hg_loss_%s = %.17g;" % (tag, loss(logits_of(Wr, c, tok), tgt)))
            lines.append("static const double hg_sums_%s[] = { /* each tensor's sum, fsc's order */" % tag)
            for name, _, _ in specs:
                s = 0.0
                for v in Wr[name].reshape(-1).tolist():
                    s += v
                lines.append("    %.17g, /* %s */" % (s, name))
            lines.append("};")
    with open(outdir + "/hf_golden.h", "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
