"""A tiny Llama layer in torch (hidden 64, one token), whose modules ``serveplan profile`` times to
measure the host cost of dispatching each module (BestServe's dispatch time).

Imported only when profiling, because it imports torch (the ``profile`` extra).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

#: hidden size, intermediate size, query heads, KV heads, head dimension
SHAPE = (64, 128, 4, 2, 16)
H, FF, HQ, HKV, D = SHAPE
#: vocabulary of the tiny LM head
VOCAB = 256


def _lin(i: int, o: int, dtype: Any, device: Any) -> nn.Linear:
    return nn.Linear(i, o, bias=False, dtype=dtype, device=device)


class RMSNorm(nn.Module):
    def __init__(self, dtype: Any, device: Any) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(H, dtype=dtype, device=device))

    def forward(self, x: Any) -> Any:  # Hugging Face LlamaRMSNorm.forward
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + 1e-6))


class Attention(nn.Module):
    """Hugging Face LlamaAttention.forward with a static cache: projections, RoPE, cache write,
    SDPA, output projection, residual add."""

    def __init__(self, dtype: Any, device: Any) -> None:
        super().__init__()
        self.q, self.k = _lin(H, HQ * D, dtype, device), _lin(H, HKV * D, dtype, device)
        self.v, self.o = _lin(H, HKV * D, dtype, device), _lin(HQ * D, H, dtype, device)
        self.kc = torch.zeros(1, HKV, 16, D, dtype=dtype, device=device)
        self.vc = torch.zeros(1, HKV, 16, D, dtype=dtype, device=device)
        self.pos = torch.tensor([15], device=device)

    @staticmethod
    def rot(x: Any) -> Any:
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def forward(self, x: Any, cos: Any, sin: Any) -> Any:
        q = self.q(x).view(1, 1, HQ, D).transpose(1, 2)
        k = self.k(x).view(1, 1, HKV, D).transpose(1, 2)
        v = self.v(x).view(1, 1, HKV, D).transpose(1, 2)
        q = q * cos + self.rot(q) * sin
        k = k * cos + self.rot(k) * sin
        self.kc.index_copy_(2, self.pos, k)
        self.vc.index_copy_(2, self.pos, v)
        qg = q.reshape(1, HKV, HQ // HKV, D)
        o = torch.nn.functional.scaled_dot_product_attention(qg, self.kc, self.vc)
        return x + self.o(o.reshape(1, 1, HQ * D))


class MLP(nn.Module):
    def __init__(self, dtype: Any, device: Any) -> None:
        super().__init__()
        self.g, self.u, self.dn = _lin(H, FF, dtype, device), _lin(H, FF, dtype, device), _lin(FF, H, dtype, device)

    def forward(self, x: Any) -> Any:
        return x + self.dn(torch.nn.functional.silu(self.g(x)) * self.u(x))


class Head(nn.Module):
    def __init__(self, dtype: Any, device: Any) -> None:
        super().__init__()
        self.norm, self.out = RMSNorm(dtype, device), _lin(H, VOCAB, dtype, device)

    def forward(self, x: Any) -> Any:
        return self.out(self.norm(x))


#: module kind (:class:`serveplan.specs.profile.Module` value) -> its torch module
MODULES: dict[str, type[nn.Module]] = {"norm": RMSNorm, "attention": Attention, "mlp": MLP, "lm_head": Head}
