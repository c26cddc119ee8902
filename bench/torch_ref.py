"""PyTorch reference of tessera's training step: the same GPT-2 (learned
positions, LayerNorm, tanh GELU, tied embeddings, padded vocabulary), fp32,
AdamW (foreach), global-norm clipping. Prints the same row as bench_train.
With bf16, the forward and backward run under torch.autocast("cpu",
bfloat16) (oneDNN's bf16 products), the masters and AdamW in fp32.

    python3 torch_ref.py PRESET B T VOCAB STEPS THREADS SGEMM_GFLOPS [fp32|bf16 [PEAK_GFLOPS]]
"""
import contextlib
import math
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {"gpt2-tiny": (4, 4, 128, 64), "gpt2-124m": (12, 12, 768, 1024)}


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.nh = NH
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.nh, C // self.nh).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True) if hasattr(F, "scaled_dot_product_attention") \
            else self.attn_naive(q, k, v, T)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    @staticmethod
    def attn_naive(q, k, v, T):
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        return att.masked_fill(~mask, float("-inf")).softmax(-1) @ v


class GPT(nn.Module):
    def __init__(self, L, NH, C, maxT, Vp):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(Vp, C), nn.Embedding(maxT, C)
        self.h = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx, tgt, V):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight[:V].t()
        return F.cross_entropy(logits.view(-1, V), tgt.view(-1))


def main():
    preset, B, T, V, steps, threads, ceiling = sys.argv[1], *map(int, sys.argv[2:7]), float(sys.argv[7])
    prec = sys.argv[8] if len(sys.argv) > 8 else "fp32"
    peak = float(sys.argv[9]) if len(sys.argv) > 9 else 204.8
    amp = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if prec == "bf16" else contextlib.nullcontext
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    L, NH, C, maxT = PRESETS[preset]
    Vp = (V + 127) // 128 * 128
    m = GPT(L, NH, C, maxT, Vp)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, foreach=True)
    times = []
    for i in range(steps + 1):
        idx, tgt = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with amp():
            loss = m(idx, tgt, V)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        if i:
            times.append(time.perf_counter() - t0)
    med = sorted(times)[len(times) // 2]
    n = sum(p.numel() for p in m.parameters()) - (Vp - V) * C
    tps = B * T / med
    gf = (6 * n + 12 * L * T * C) * tps * 1e-9
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{'torch ' + preset + ' ' + prec:<16} {B:3d} {T:4d} {V:6d} | {med * 1e3:9.1f} | {tps:8.0f} | {gf:6.1f} | "
          f"{(f'{100 * gf / ceiling:5.1f}%' if ceiling > 0 else '     -')} | {100 * gf / peak:5.1f}% |       - | {rss:7.0f}")


main()
