"""A CPU stand-in for the parts of `transformer_engine.pytorch` the step benchmark builds, in plain
torch, with TE's call signatures. It lets the CPU tests run the benchmark's layers end to end
(shapes, routing, gradients, the optimizer step) where TE and a GPU are missing; it says nothing
about speed. Used only when torch is importable."""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

_state = {"autocast": False, "init": False}
calls: list[tuple] = []
# the normalization each LayerNormLinear was built with, in order
normalizations: list[str] = []


@contextlib.contextmanager
def quantized_model_init(enabled: bool = False, recipe=None):
    prev, _state["init"] = _state["init"], enabled
    try:
        yield
    finally:
        _state["init"] = prev


@contextlib.contextmanager
def autocast(enabled: bool = True, recipe=None):
    prev, _state["autocast"] = _state["autocast"], enabled
    try:
        yield
    finally:
        _state["autocast"] = prev


def _weight(out_f, in_f, dtype, device):
    return torch.nn.Parameter(torch.randn(out_f, in_f, dtype=dtype, device=device) * in_f**-0.5)


class _Base(torch.nn.Module):
    def __init__(self):
        super().__init__()
        # built under quantized_model_init: TE would hold this module's weights in FP8
        self.fp8_weights = _state["init"]

    def _note(self, rows):
        calls.append((type(self).__name__, self.in_features, self.out_features, rows, _state["autocast"]))


class Linear(_Base):
    """With `parallel_mode`, TE's tensor-parallel module with sequence parallelism: the weight is
    this rank's split; a column module all-gathers its input's sequence shards first, a row module
    reduce-scatters its output (here an all-reduce and this rank's slice: gloo has no
    reduce-scatter). The collectives are autograd-aware, as TE's are."""

    def __init__(self, in_features, out_features, bias=False, params_dtype=torch.float32, device="cpu",
                 tp_group=None, tp_size=1, sequence_parallel=False, parallel_mode=None):
        super().__init__()
        if parallel_mode not in (None, "column", "row"):
            raise ValueError(f"parallel_mode {parallel_mode!r}")
        if parallel_mode and (not sequence_parallel or tp_group is None):
            raise ValueError("the stand-in models sequence-parallel TP modules only")
        self.mode, self.group, self.tp = parallel_mode, tp_group, tp_size
        if parallel_mode == "column":
            out_features //= tp_size
        elif parallel_mode == "row":
            in_features //= tp_size
        self.in_features, self.out_features = in_features, out_features
        self.fp8_param = _state["init"]
        self.weight = _weight(out_features, in_features, params_dtype, device)

    def forward(self, x):
        import torch.distributed.nn.functional as dnn

        if self.mode == "column":
            x = torch.cat(dnn.all_gather(x.contiguous(), group=self.group))
        self._note(x.reshape(-1, x.shape[-1]).shape[0])
        if x.shape[-1] != self.in_features:
            raise ValueError(f"Linear({self.in_features}, {self.out_features}) got {tuple(x.shape)}")
        y = F.linear(x, self.weight)
        if self.mode == "row":
            import torch.distributed as dist

            y = dnn.all_reduce(y, group=self.group).chunk(self.tp)[dist.get_rank(self.group)]
        return y


class LayerNormLinear(Linear):
    def __init__(self, in_features, out_features, normalization="RMSNorm", **kw):
        super().__init__(in_features, out_features, **kw)
        self.layer_norm_weight = torch.nn.Parameter(torch.ones(in_features, dtype=self.weight.dtype, device=self.weight.device))
        self.normalization = normalization
        normalizations.append(normalization)

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)
        return super().forward((xf * self.layer_norm_weight.float()).to(x.dtype))


class GroupedLinear(_Base):
    def __init__(self, num_gemms, in_features, out_features, bias=False, params_dtype=torch.float32, device="cpu"):
        super().__init__()
        self.num_gemms, self.in_features, self.out_features = num_gemms, in_features, out_features
        for i in range(num_gemms):
            setattr(self, f"weight{i}", _weight(out_features, in_features, params_dtype, device))

    def forward(self, x, m_splits):
        if len(m_splits) != self.num_gemms or sum(m_splits) != x.shape[0]:
            raise ValueError(f"GroupedLinear: splits {m_splits} do not cover {x.shape[0]} rows in {self.num_gemms} GEMMs")
        if _state["autocast"] and any(m % 16 for m in m_splits):
            raise ValueError(f"GroupedLinear in FP8 needs splits that are multiples of 16: {m_splits}")
        self._note(x.shape[0])
        outs = [F.linear(part, getattr(self, f"weight{i}")) for i, part in enumerate(x.split(list(m_splits)))]
        return torch.cat(outs)


class _Norm(torch.nn.Module):
    def __init__(self, hidden, eps=1e-5, params_dtype=torch.float32, device="cpu"):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden, dtype=params_dtype, device=device))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight.float()).to(x.dtype)


RMSNorm = LayerNorm = _Norm


class DotProductAttention(torch.nn.Module):
    def __init__(self, num_attention_heads, kv_channels, num_gqa_groups=None, attn_mask_type="causal", qkv_format="sbhd"):
        super().__init__()
        self.h = num_attention_heads
        self.g = num_gqa_groups or num_attention_heads
        self.dk, self.dv = kv_channels if isinstance(kv_channels, tuple) else (kv_channels, kv_channels)
        self.causal = attn_mask_type == "causal"

    def forward(self, q, k, v):
        s, b = q.shape[:2]
        want = ((s, b, self.h, self.dk), (s, b, self.g, self.dk), (s, b, self.g, self.dv))
        if (tuple(q.shape), tuple(k.shape), tuple(v.shape)) != want:
            raise ValueError(f"DotProductAttention: got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}, want {want}")
        rep = self.h // self.g
        q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return o.permute(2, 0, 1, 3).reshape(s, b, self.h * self.dv)


def make_graphed_callables(modules, sample_args, enabled=False, recipe=None, **_):
    calls.append(("make_graphed_callables", len(modules)))
    return modules
