"""A GPT-2-style decoder-only transformer (Radford et al. 2019), written for memplan.

Token + learned position embeddings (with dropout), ``n_layer`` pre-LayerNorm blocks (causal
multi-head self-attention, then a 4x-wide MLP with tanh-approximated GELU, each added back to the
residual stream, each followed by dropout), a final LayerNorm and a bias-free language-model head
whose weight is tied to the token embedding (``tie_weights=True``). With the GPT-2 "small" setting
(vocab 50257, context 1024, 12 layers, width 768, 12 heads) it has 124,439,808 parameters.

Attention is written out (scores, causal mask, softmax, dropout, weighted sum) instead of calling a
fused kernel, so that what autograd keeps (the T x T probabilities) is visible to the profiler, and
so that the model traces with torch.fx: sizes are read one at a time (``x.size(1)``), never unpacked.
The input is a LongTensor of token ids (batch, seq) with seq <= n_ctx; the output the logits.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int, dropout: float):
        super().__init__()
        if n_embd % n_head:
            raise ValueError(f"n_embd={n_embd} is not a multiple of n_head={n_head}")
        self.n_head, self.head_dim = n_head, n_embd // n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_drop, self.resid_drop = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x):
        b, t = x.size(0), x.size(1)
        qkv = self.c_attn(x).view(b, t, 3, self.n_head, self.head_dim)
        q = qkv[:, :, 0].transpose(1, 2)
        k = qkv[:, :, 1].transpose(1, 2)
        v = qkv[:, :, 2].transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        causal = att.new_ones((t, t), dtype=torch.bool).tril()
        att = att.masked_fill(~causal, float("-inf"))
        att = self.attn_drop(F.softmax(att, dim=-1))
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, self.n_head * self.head_dim)
        return self.resid_drop(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, n_embd: int, dropout: float):
        super().__init__()
        self.c_fc, self.c_proj = nn.Linear(n_embd, 4 * n_embd), nn.Linear(4 * n_embd, n_embd)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.drop(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int, n_ctx: int, dropout: float):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, dropout)
        self.mlp = MLP(n_embd, dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class SDPABlock(nn.Module):
    """A GPT block written the way ``torch.compile`` users write it: pre-norm, one fused q/k/v
    projection, PyTorch's ``scaled_dot_product_attention`` (causal), a GELU MLP of width ``4 d``. It
    maps ``(batch, tokens, d)`` to the same shape; :mod:`memplan._compile_budget`'s example and tests
    stack a few of them. It unpacks ``x.shape``, which ``torch.compile`` traces and ``torch.fx``'s
    symbolic tracing does not (the zoo's GPT-2 above is written for the latter)."""

    def __init__(self, d: int = 128, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


class Embedding(nn.Module):
    def __init__(self, vocab: int, n_ctx: int, n_embd: int, dropout: float):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, n_embd), nn.Embedding(n_ctx, n_embd)
        self.drop = nn.Dropout(dropout)

    def forward(self, idx):
        pos = torch.arange(idx.size(1), device=idx.device)
        return self.drop(self.wte(idx) + self.wpe(pos))


class GPT2(nn.Module):
    def __init__(self, vocab: int = 50257, n_ctx: int = 1024, n_layer: int = 12, n_embd: int = 768,
                 n_head: int = 12, dropout: float = 0.1, tie_weights: bool = True):
        super().__init__()
        self.config = dict(vocab=vocab, n_ctx=n_ctx, n_layer=n_layer, n_embd=n_embd, n_head=n_head,
                           dropout=dropout, tie_weights=tie_weights)
        self.embed = Embedding(vocab, n_ctx, n_embd, dropout)
        self.blocks = nn.Sequential(*[Block(n_embd, n_head, n_ctx, dropout) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        for name, p in self.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                std = 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
        if tie_weights:
            self.lm_head.weight = self.embed.wte.weight

    def forward(self, idx):
        return self.lm_head(self.ln_f(self.blocks(self.embed(idx))))


def gpt2(**kw): return GPT2(**kw)
