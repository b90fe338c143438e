"""A Llama-style decoder stack (Touvron et al. 2023, "LLaMA: open and efficient foundation language
models", section 2.2), written for memplan, small by default.

What makes it Llama-style rather than GPT-2 (:mod:`gpt2`): RMSNorm before each sub-layer (no mean, no
bias: ``x / sqrt(mean(x^2) + eps) * weight``), rotary position embeddings applied to the queries and
keys (no learned positions; the rotation pairs dimension i with i + head_dim/2), bias-free linear
layers, and a SwiGLU MLP (Shazeer 2020, "GLU variants improve Transformer"):
``w2(silu(w1(x)) * w3(x))`` with hidden width ``hidden`` (default 8/3 of the width rounded up to a
multiple of 32, as the paper's 2/3 * 4d). The SwiGLU's two wide products and their pointwise
combination are what PyTorch's activation-memory-budget partitioner decides on per tensor (the shape
of PyTorch issue 197838's stack); they make a block's saved activations large next to its input.

Attention is written out (scores, causal mask, softmax, weighted sum) like :mod:`gpt2`, so that what
autograd keeps is visible to the profiler and the model traces with torch.fx. The input is a
LongTensor of token ids (batch, seq) with seq <= n_ctx; the output the logits (an untied head).
Parameters: ``vocab * d`` (embedding) + ``n_layer * (4 d^2 + 3 d hidden + 2 d)`` + ``d`` (final
norm) + ``d * vocab`` (head).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rotate(x, cos, sin):
    """Rotary embedding: the pair (x_i, x_{i+h/2}) rotated by angle pos * theta_i."""
    half = x.size(-1) // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Attention(nn.Module):
    def __init__(self, d: int, n_head: int, n_ctx: int, base: float = 10000.0):
        super().__init__()
        if d % n_head or (d // n_head) % 2:
            raise ValueError(f"d={d} must be a multiple of n_head={n_head} with an even head size")
        self.n_head, self.head_dim = n_head, d // n_head
        self.wq, self.wk = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.wv, self.wo = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        half = self.head_dim // 2
        theta = base ** (-torch.arange(half, dtype=torch.float32) / half)
        ang = torch.arange(n_ctx, dtype=torch.float32)[:, None] * theta[None, :]      # n_ctx x half
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def forward(self, x):
        b, t = x.size(0), x.size(1)
        q = self.wq(x).view(b, t, self.n_head, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, self.n_head, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, self.n_head, self.head_dim).transpose(1, 2)
        cos, sin = torch.narrow(self.cos, 0, 0, t), torch.narrow(self.sin, 0, 0, t)   # traceable with a symbolic t
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        causal = att.new_ones((t, t), dtype=torch.bool).tril()
        att = F.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, self.n_head * self.head_dim)
        return self.wo(y)


class SwiGLU(nn.Module):
    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.w1, self.w3 = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, d: int, n_head: int, hidden: int, n_ctx: int):
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(d), RMSNorm(d)
        self.attn = Attention(d, n_head, n_ctx)
        self.mlp = SwiGLU(d, hidden)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


def swiglu_hidden(d: int, multiple: int = 32) -> int:
    """The paper's hidden width: 2/3 of 4d, rounded up to a multiple of ``multiple``."""
    h = int(2 * 4 * d / 3)
    return multiple * ((h + multiple - 1) // multiple)


class Llama(nn.Module):
    def __init__(self, vocab: int = 8000, n_ctx: int = 256, n_layer: int = 4, d_model: int = 256,
                 n_head: int = 4, hidden: int | None = None):
        super().__init__()
        hidden = swiglu_hidden(d_model) if hidden is None else hidden
        self.config = dict(vocab=vocab, n_ctx=n_ctx, n_layer=n_layer, d_model=d_model, n_head=n_head,
                           hidden=hidden)
        self.tok = nn.Embedding(vocab, d_model)
        self.blocks = nn.Sequential(*[Block(d_model, n_head, hidden, n_ctx) for _ in range(n_layer)])
        self.norm = RMSNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx):
        return self.head(self.norm(self.blocks(self.tok(idx))))


def llama(**kw): return Llama(**kw)
