"""A small Transformer encoder-decoder (Vaswani et al. 2017, "Attention is all you need"), written for
memplan.

Shared token embedding for source and target (scaled by sqrt(d_model)) plus sinusoidal position
encodings, then dropout; ``n_enc`` encoder layers (self-attention, feed-forward) and ``n_dec`` decoder
layers (causal self-attention, **cross-attention over the encoder's output**, feed-forward), each
sub-layer post-norm: ``LayerNorm(x + dropout(sublayer(x)))``; the feed-forward is
Linear(d_model, d_ff) - ReLU - Linear(d_ff, d_model). The output projection has no bias and shares
the embedding's weight (as in the paper). Attention is written out (scores, mask, softmax, dropout,
weighted sum) like :mod:`gpt2`, so that what autograd keeps is visible to the profiler.

What matters for memplan: every decoder layer reads the encoder's output, and the target tokens are
read only after the encoder has run, so several tensors cross every boundary between the input and
the last decoder layer.

**Input**: capture needs one input tensor, so the model takes one LongTensor of token ids of shape
(batch, src_len + tgt_len): the first ``src_len`` columns (a constructor argument) are the source
sentence, the rest the target sentence (shifted right, as in teacher forcing). No padding masks (the
zoo's inputs have none). The output is the logits (batch, tgt_len, vocab). Small defaults: vocab
8000, d_model 256, 4 heads, d_ff 1024, 4 + 4 layers, src_len 64 (default input: 128 ids, 64 + 64).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def __init__(self, d_model: int, n_head: int, dropout: float, causal: bool):
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"d_model={d_model} is not a multiple of n_head={n_head}")
        self.n_head, self.head_dim, self.causal = n_head, d_model // n_head, causal
        self.q, self.k = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.v, self.o = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mem):
        b, t, s = x.size(0), x.size(1), mem.size(1)
        q = self.q(x).view(b, t, self.n_head, self.head_dim).transpose(1, 2)
        k = self.k(mem).view(b, s, self.n_head, self.head_dim).transpose(1, 2)
        v = self.v(mem).view(b, s, self.n_head, self.head_dim).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        if self.causal:
            att = att.masked_fill(~att.new_ones((t, s), dtype=torch.bool).tril(), float("-inf"))
        att = self.drop(F.softmax(att, dim=-1))
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, self.n_head * self.head_dim)
        return self.o(y)


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.fc1, self.relu, self.fc2 = nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.fc2(self.relu(self.fc1(x)))


class EncoderLayer(nn.Module):
    def __init__(self, d_model: int, n_head: int, d_ff: int, dropout: float):
        super().__init__()
        self.attn = Attention(d_model, n_head, dropout, causal=False)
        self.ff = FeedForward(d_model, d_ff)
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x):
        x = self.ln1(x + self.drop1(self.attn(x, x)))
        return self.ln2(x + self.drop2(self.ff(x)))


class DecoderLayer(nn.Module):
    def __init__(self, d_model: int, n_head: int, d_ff: int, dropout: float):
        super().__init__()
        self.self_attn = Attention(d_model, n_head, dropout, causal=True)
        self.cross_attn = Attention(d_model, n_head, dropout, causal=False)
        self.ff = FeedForward(d_model, d_ff)
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.drop1, self.drop2, self.drop3 = nn.Dropout(dropout), nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, y, mem):
        y = self.ln1(y + self.drop1(self.self_attn(y, y)))
        y = self.ln2(y + self.drop2(self.cross_attn(y, mem)))
        return self.ln3(y + self.drop3(self.ff(y)))


def sinusoids(n_ctx: int, d_model: int) -> torch.Tensor:
    """Position encodings: PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(same)."""
    pos = torch.arange(n_ctx, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(n_ctx, d_model)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq[: d_model // 2])
    return pe


class Transformer(nn.Module):
    def __init__(self, vocab: int = 8000, src_len: int = 64, n_ctx: int = 512, d_model: int = 256,
                 n_head: int = 4, d_ff: int = 1024, n_enc: int = 4, n_dec: int = 4, dropout: float = 0.1):
        super().__init__()
        if src_len < 1:
            raise ValueError(f"src_len={src_len}: the source needs at least one token")
        self.config = dict(vocab=vocab, src_len=src_len, n_ctx=n_ctx, d_model=d_model, n_head=n_head,
                           d_ff=d_ff, n_enc=n_enc, n_dec=n_dec, dropout=dropout)
        self.src_len, self.scale = src_len, math.sqrt(d_model)
        self.tok = nn.Embedding(vocab, d_model)
        self.register_buffer("pe", sinusoids(n_ctx, d_model), persistent=False)
        self.src_drop, self.tgt_drop = nn.Dropout(dropout), nn.Dropout(dropout)
        self.encoder = nn.ModuleList([EncoderLayer(d_model, n_head, d_ff, dropout) for _ in range(n_enc)])
        self.decoder = nn.ModuleList([DecoderLayer(d_model, n_head, d_ff, dropout) for _ in range(n_dec)])
        self.out = nn.Linear(d_model, vocab, bias=False)
        nn.init.normal_(self.tok.weight, 0.0, d_model ** -0.5)
        self.out.weight = self.tok.weight

    def forward(self, ids):
        src, tgt = ids[:, : self.src_len], ids[:, self.src_len:]
        mem = self.src_drop(self.tok(src) * self.scale + self.pe.narrow(0, 0, src.size(1)))
        for layer in self.encoder:
            mem = layer(mem)
        y = self.tgt_drop(self.tok(tgt) * self.scale + self.pe.narrow(0, 0, tgt.size(1)))
        for layer in self.decoder:
            y = layer(y, mem)
        return self.out(y)


def transformer(**kw): return Transformer(**kw)
