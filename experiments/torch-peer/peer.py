#!/usr/bin/python3
"""PyTorch's CPU training step for the models of zenflow's specs: the peer of zenflow-run's device-adam.

Builds, from a zenflow spec, the same model (docs/gpt.md: GPT-2 blocks, pre-LayerNorm, GELU tanh
form, causal attention, untied LM head without bias; the MLP of docs/spec.md; or, for
`model.type "hf"` with a Llama config.json, a Llama written here in plain PyTorch, not
transformers: docs/llama.md's RMSNorm, rotary embeddings in Hugging Face's rotate-half
convention, grouped-query attention, the SwiGLU MLP, tied or untied head), the same
optimizer (torch.optim.AdamW with the spec's lr, betas, eps, weight decay) and the same batch
shape, and times full training steps: zero_grad, forward, loss, backward, optimizer.step().
Inputs are random bytes / random images of the spec's shapes: the work of a step does not depend
on the values. Prints one JSON object: {"model", "precision", "steps", "warmup", "omp_threads",
"blas_threads", "median_s", "mean_s", "min_s", "params", "flops_per_step", "torch"}.
--precision bf16: the forward and the loss under torch.autocast("cpu", dtype=torch.bfloat16)
(PyTorch's CPU mixed precision: the linear layers and the attention's matmuls in bf16 through
oneDNN, fp32 weights and optimizer, the backward outside the context as PyTorch prescribes).

The thread set-up is the caller's: OMP_NUM_THREADS / --threads sets torch's intra-op threads
(torch.set_num_threads); Debian's torch calls the system OpenBLAS, whose own thread count only
OPENBLAS_NUM_THREADS (read at load time) sets, so run.sh starts one process per set-up.
Usage: peer.py SPEC --threads N [--steps 60] [--warmup 10] [--precision fp32|bf16]
"""
import argparse
import json
import math
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, nh):
        super().__init__()
        self.nh = nh
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x, mask):
        B, T, C = x.shape
        hs = C // self.nh
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, self.nh, hs).transpose(1, 2)
        k = k.view(B, T, self.nh, hs).transpose(1, 2)
        v = v.view(B, T, self.nh, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, m, vocab=256):
        super().__init__()
        C, T = m["n_embd"], m["context"]
        self.wte = nn.Embedding(vocab, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, m["n_head"]) for _ in range(m["n_layer"]))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        self.lm_head = nn.Linear(C, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1))
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.h:
            x = b(x, self.mask)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(B * T, -1), targets.view(B * T))


class RMSNorm(nn.Module):
    """Hugging Face's LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) * w, in fp32."""
    def __init__(self, C, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    d = x.shape[-1] // 2
    return torch.cat((-x[..., d:], x[..., :d]), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        C, F = c["hidden_size"], c["intermediate_size"]
        self.H, self.Hkv = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
        self.hs = c.get("head_dim", C // self.H)
        bias = c.get("attention_bias", False)
        self.input_layernorm = RMSNorm(C, c["rms_norm_eps"])
        self.q_proj = nn.Linear(C, self.H * self.hs, bias=bias)
        self.k_proj = nn.Linear(C, self.Hkv * self.hs, bias=bias)
        self.v_proj = nn.Linear(C, self.Hkv * self.hs, bias=bias)
        self.o_proj = nn.Linear(self.H * self.hs, C, bias=bias)
        self.post_attention_layernorm = RMSNorm(C, c["rms_norm_eps"])
        self.gate_proj = nn.Linear(C, F, bias=False)
        self.up_proj = nn.Linear(C, F, bias=False)
        self.down_proj = nn.Linear(F, C, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(B, T, self.H, self.hs).transpose(1, 2)
        k = self.k_proj(h).view(B, T, self.Hkv, self.hs).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.Hkv, self.hs).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin  # HF's apply_rotary_pos_emb
        k = k * cos + rotate_half(k) * sin
        g = self.H // self.Hkv  # HF's repeat_kv: consecutive query heads share a KV head
        k = k.repeat_interleave(g, dim=1)
        v = v.repeat_interleave(g, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hs))
        att = att.masked_fill(mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, self.H * self.hs)
        x = x + self.o_proj(y)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    """LlamaForCausalLM of a config.json (docs/llama.md), initialised as Hugging Face does."""
    def __init__(self, c, T):
        super().__init__()
        if c.get("rope_scaling") is not None:
            raise SystemExit("peer.py: rope_scaling: only null is written here")
        V, C = c["vocab_size"], c["hidden_size"]
        self.embed_tokens = nn.Embedding(V, C)
        self.layers = nn.ModuleList(LlamaBlock(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(C, c["rms_norm_eps"])
        self.lm_head = nn.Linear(C, V, bias=False)
        if c.get("tie_word_embeddings", False):
            self.lm_head.weight = self.embed_tokens.weight
        hs = self.layers[0].hs
        inv_freq = 1.0 / (c.get("rope_theta", 10000.0) ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
        ang = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
        ang = torch.cat((ang, ang), dim=-1)  # (T, hs): the pairs (i, i + hs/2) share an angle
        self.register_buffer("cos", ang.cos().float())
        self.register_buffer("sin", ang.sin().float())
        self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1))
        for mod in self.modules():
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                nn.init.normal_(mod.weight, 0.0, c.get("initializer_range", 0.02))
                if getattr(mod, "bias", None) is not None:
                    nn.init.zeros_(mod.bias)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.embed_tokens(idx)
        cos, sin = self.cos[:T], self.sin[:T]
        for b in self.layers:
            x = b(x, cos, sin, self.mask)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.view(B * T, -1), targets.view(B * T))


def linear_flops(model, tokens):
    """6 x (weights of the linear layers, the head included) x tokens: the matmuls' forward and
    backward (flops.py's count)."""
    return 6 * sum(mod.weight.numel() for mod in model.modules() if isinstance(mod, nn.Linear)) * tokens


def mlp(m, inputs=784, classes=10):
    act = {"relu": nn.ReLU, "gelu": lambda: nn.GELU(approximate="tanh")}[m.get("activation", "relu")]
    layers, w = [], inputs
    for h in m["hidden"]:
        layers += [nn.Linear(w, h), act()]
        w = h
    layers.append(nn.Linear(w, classes))
    return nn.Sequential(*layers)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("spec")
    ap.add_argument("--threads", type=int, required=True, help="torch.set_num_threads (intra-op)")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    with open(a.spec) as f:
        spec = json.load(f)
    m, tr, opt = spec["model"], spec["train"], spec.get("optimizer", {})
    B = tr["batch_size"]
    if m["type"] == "gpt":
        T = m["context"]
        model = Gpt(m)
        data = lambda: (torch.randint(0, 256, (B, T)), torch.randint(0, 256, (B, T)))
        run = lambda x, y: model(x, y)
        params = sum(p.numel() for p in model.parameters())
        # the count docs/ and the issue use: 6 x params x tokens + 12 x layers x B x T^2 x C
        flops = 6 * params * B * T + 12 * m["n_layer"] * B * T * T * m["n_embd"]
    elif m["type"] == "hf":
        path = m["path"]
        if not os.path.isabs(path) and not os.path.exists(path):  # relative to the repository
            path = os.path.join(os.path.dirname(os.path.abspath(a.spec)), "..", "..", path)
        with open(os.path.join(path, "config.json")) as f:
            c = json.load(f)
        if c.get("model_type") not in ("llama", "mistral"):
            raise SystemExit(f"{path}/config.json: model_type {c.get('model_type')!r}: peer.py writes the Llama only")
        T, V = m["context"], c["vocab_size"]
        model = Llama(c, T)
        data = lambda: (torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T)))
        run = lambda x, y: model(x, y)
        params = sum(p.numel() for p in model.parameters())  # a tied weight once
        L, Q = c["num_hidden_layers"], model.layers[0].H * model.layers[0].hs
        # flops.py's count: the linears' 6 x weights x tokens, attention's products
        # 12 x layers x B x T^2 x (H hs) (2 forward, 4 backward, each 2 B H T^2 hs)
        flops = linear_flops(model, B * T) + 12 * L * B * T * T * Q
    elif m["type"] == "mlp":
        model = mlp(m)
        data = lambda: (torch.rand(B, 784), torch.randint(0, 10, (B,)))
        run = lambda x, y: F.cross_entropy(model(x), y)
        params = sum(p.numel() for p in model.parameters())
        flops = 6 * params * B
    else:
        raise SystemExit(f"{a.spec}: model.type {m['type']!r}: peer.py knows gpt and mlp")
    betas = opt.get("betas", [0.9, 0.999])
    optim = torch.optim.AdamW(model.parameters(), lr=opt.get("lr", 1e-3), betas=tuple(betas),
                              eps=opt.get("eps", 1e-8), weight_decay=opt.get("weight_decay", 0.01))
    times = []
    for s in range(a.warmup + a.steps):
        x, y = data()
        t0 = time.perf_counter()
        optim.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = run(x, y)
        loss.backward()
        optim.step()
        dt = time.perf_counter() - t0
        if s >= a.warmup:
            times.append(dt)
    print(json.dumps({"model": m["type"], "precision": a.precision, "steps": a.steps, "warmup": a.warmup, "omp_threads": a.threads,
                      "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
                      "median_s": statistics.median(times), "mean_s": statistics.fmean(times),
                      "min_s": min(times), "params": params, "flops_per_step": flops,
                      "torch": torch.__version__, "final_loss": float(loss)}))


if __name__ == "__main__":
    main()
