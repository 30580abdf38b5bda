"""The step benchmark's torch half: one rank's layers built with TE (or a stand-in with TE's
signatures), the training step (micro-batches of forward + backward, one optimizer step), CUDA
graph capture, and timing. Imported by `adaptive_fp8.bench.step_bench` only when a benchmark runs;
what it builds is described in `adaptive_fp8.bench.step_spec`."""

from __future__ import annotations

import time

from adaptive_fp8._common import te_api
from adaptive_fp8.bench.step_spec import PARALLEL_MODE, Spec, StepBenchError, full_features


class Bench:
    """The torch/TE half; imported only when a benchmark runs. `te` and `device` can be replaced
    (the CPU tests build the same layers with a stand-in for TE)."""

    def __init__(self, args, te=None, device: str = "cuda") -> None:
        import torch

        if te is None:
            import transformer_engine.pytorch as te

            if not torch.cuda.is_available():
                raise StepBenchError("skipped: no CUDA device (torch.cuda.is_available() is False)")
        from adaptive_fp8.bench.collector import Collector
        from adaptive_fp8.bench.step_common import recipe_options
        from adaptive_fp8.bench.te_worker import make_recipe

        self.torch, self.te, self.args, self.device = torch, te, args, device
        self.recipe = make_recipe(recipe_options(args)) if device == "cuda" else None
        self.model_init, self.autocast, self.recipe_kw = te_api(te)
        # FP8 weights only where asked (--fp8-param): by default an FP8 module holds BF16 weights
        # and quantizes them in its forward, as Megatron trains without --fp8-param-gather.
        self.fp8_param = bool(getattr(args, "fp8_param", False))
        self.group, self.world, self.rank = None, 1, 0
        # Python's collections inside timed steps, counted (off there with --manual-gc).
        self.collector = Collector(getattr(args, "manual_gc", False))
        if getattr(args, "tp_comm", False):
            self._join_tp_group()

    def _join_tp_group(self) -> None:
        """The torchrun world is the TP group (NCCL on the GPU; gloo for the CPU stand-in)."""
        import os

        import torch.distributed as dist

        if self.device == "cuda":
            self.torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        if not dist.is_initialized():
            dist.init_process_group("nccl" if self.device == "cuda" else "gloo")
        self.dist, self.world, self.rank = dist, dist.get_world_size(), dist.get_rank()
        self.group = dist.new_group(list(range(self.world)))

    def close(self) -> None:
        """Lines the ranks up at the end. The process group is not destroyed: with CUDA graphs
        that captured NCCL collectives, destroy_process_group hung on the H200 after every case
        had finished; the caller ends the process instead (`step_bench.main`)."""
        if self.group is not None:
            if self.device == "cuda":
                self.torch.cuda.synchronize()
            self.dist.barrier(group=self.group)

    # -- building ------------------------------------------------------------------------------

    def _linear(self, fp8: dict[str, bool], spec: Spec, group: str, norm: bool = False, grouped: bool = False):
        torch, te = self.torch, self.te
        m = spec.modules[group]
        kw = dict(bias=False, params_dtype=torch.bfloat16, device=self.device)
        k, n = m.in_features, m.out_features
        if self.group is not None and not grouped:
            # Megatron's TE modules with sequence parallelism: full features, split over the group.
            kw.update(tp_group=self.group, tp_size=self.world, sequence_parallel=True, parallel_mode=PARALLEL_MODE[group])
            k, n = full_features(m, self.world)
        on = fp8[group]
        with self.model_init(enabled=on and self.fp8_param, recipe=self.recipe):
            if grouped:
                mod = te.GroupedLinear(m.gemms, k, n, **kw)
            elif norm:
                mod = te.LayerNormLinear(k, n, normalization=spec.norm, **kw)
            else:
                mod = te.Linear(k, n, **kw)
        if not on:
            from adaptive_fp8.megatron import run_in_bf16

            run_in_bf16(mod, self.autocast)
        return mod

    def _norm(self, spec: Spec):
        te = self.te
        cls = te.RMSNorm if spec.norm == "RMSNorm" else te.LayerNorm
        return cls(spec.hidden, params_dtype=self.torch.bfloat16, device=self.device)

    def build(self, spec: Spec, kinds: list[str], fp8: dict[str, bool]):
        """One module per layer: `attn` (an nn.Module x -> x + attention(x)) and `mlp`."""
        torch = self.torch
        layers = torch.nn.ModuleList()
        for kind in kinds:
            layer = torch.nn.Module()
            layer.attn = (MlaBlock if spec.attention == "mla" else MhaBlock).make(self, spec, fp8)
            layer.mlp = (MoeBlock if kind == "moe" else DenseBlock).make(self, spec, fp8)
            layer.kind = kind
            layers.append(layer)
        return layers

    def step_fn(self, spec: Spec, layers, execution: str):
        torch = self.torch
        gen = torch.Generator(device=self.device).manual_seed(7 + self.rank)
        # With a TP group, each rank holds its sequence-parallel shard between the blocks.
        x0 = torch.randn(spec.tokens // self.world, 1, spec.hidden, device=self.device, dtype=torch.bfloat16, generator=gen)
        params = [p for p in layers.parameters() if p.requires_grad]
        # One optimizer for every mode (fp32 master weights, as Megatron keeps main params), so
        # a mode's time differs only by its GEMM precision.
        opt = self._optimizer(params)
        fwd = [(layer.attn, layer.mlp) for layer in layers]
        ctx = lambda: self.autocast(enabled=True, **{self.recipe_kw: self.recipe})  # noqa: E731
        if execution == "graphed":
            fwd = self._graph(spec, layers, x0)
        losses = []

        accum = getattr(self.args, "grad_accum", 1)

        def step():
            for _ in range(accum):
                x = x0
                with ctx():
                    for attn, mlp in fwd:
                        x = mlp(attn(x))
                loss = x.float().pow(2).mean()
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.detach())

        step.losses = losses
        return step

    def _optimizer(self, params):
        if self.device != "cuda":
            return self.torch.optim.Adam(params, lr=1e-5)
        from transformer_engine.pytorch.optimizers import FusedAdam

        return FusedAdam(params, lr=1e-5, master_weights=True)

    def _graph(self, spec: Spec, layers, x0):
        """Attention blocks and dense MLP blocks under TE's make_graphed_callables (forward and
        backward graphs, in layer order); MoE blocks stay eager callables."""
        torch = self.torch
        mods, samples = [], []
        for layer in layers:
            mods.append(layer.attn)
            if layer.kind == "dense":
                mods.append(layer.mlp)
        for _ in mods:
            samples.append((torch.randn_like(x0).requires_grad_(),))
        graphed = self.te.make_graphed_callables(tuple(mods), tuple(samples), enabled=True, recipe=self.recipe)
        it = iter(graphed)
        out = []
        for layer in layers:
            a = next(it)
            m = next(it) if layer.kind == "dense" else layer.mlp
            out.append((a, m))
        return out

    # -- running -------------------------------------------------------------------------------

    def check(self, step, name: str) -> float:
        """Warm up and check the step computes something finite and non-trivial; the last warm-up
        step's ms (synchronized; the slowest rank's with a TP group), a size for timed rounds."""
        t0 = time.perf_counter()
        for i in range(self.args.warmup):
            if i == self.args.warmup - 1:
                self._sync()
                t0 = time.perf_counter()
            step()
        self._sync()
        warm = (time.perf_counter() - t0) * 1e3
        ls = [float(v) for v in step.losses[-self.args.warmup :]]
        step.losses.clear()
        if not all(v == v and 0 < v < float("inf") for v in ls):
            raise StepBenchError(f"mode {name}: warmup losses are not finite and positive: {ls}" + (f" (rank {self.rank})" if self.group else ""))
        return self._slowest(warm)

    def time_ms(self, step, steps: int | None = None) -> float:
        """ms per step over `steps` (default `--steps`) back-to-back steps (no sync between them,
        as in training). With a TP group the ranks start together and every rank gets the slowest
        rank's time (the step waits for it), so all ranks take the same oracle decisions."""
        return self._slowest(self._time_local(step, steps or self.args.steps))

    def _sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def _slowest(self, ms: float) -> float:
        """`ms`, or with a TP group the largest of every rank's."""
        if self.group is None:
            return ms
        t = self.torch.tensor([ms], device=self.device, dtype=self.torch.float64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX, group=self.group)
        return float(t.item())

    def _time_local(self, step, n: int) -> float:
        torch = self.torch
        if self.device != "cuda":
            if self.group is not None:
                self.dist.barrier(group=self.group)
            with self.collector:
                t0 = time.perf_counter()
                for _ in range(n):
                    step()
                ms = (time.perf_counter() - t0) * 1e3 / n
            step.losses.clear()
            return ms
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        if self.group is not None:
            self.dist.barrier(group=self.group)
        with self.collector:
            a.record()
            for _ in range(n):
                step()
            b.record()
        torch.cuda.synchronize()
        step.losses.clear()
        return a.elapsed_time(b) / n

    def free(self, collect: bool = False) -> None:
        """The cached blocks back to the device; with `collect`, first what the last whole steps
        built: their steps and graphs hold reference cycles only the collector frees (a full
        collection costs about 0.1 s with torch loaded, so not after each module alone)."""
        if collect:
            import gc

            gc.collect()
        if self.device == "cuda":
            self.torch.cuda.empty_cache()


def _act(torch, h, gated: bool):
    F = torch.nn.functional
    if gated:
        g, u = h.chunk(2, dim=-1)
        return F.silu(g) * u
    return F.gelu(h, approximate="tanh")


def _module_base():
    import torch

    return torch.nn.Module


class MhaBlock:
    @staticmethod
    def make(b: Bench, spec: Spec, fp8: dict[str, bool]):
        te = b.te
        mask = "causal" if spec.causal else "no_mask"

        class Block(_module_base()):
            def __init__(self):
                super().__init__()
                self.qkv = b._linear(fp8, spec, "qkv", norm=True)
                self.core = te.DotProductAttention(spec.heads, spec.head_dim, num_gqa_groups=spec.groups, attn_mask_type=mask, qkv_format="sbhd")
                self.proj = b._linear(fp8, spec, "proj")

            def forward(self, x):
                qkv = self.qkv(x)  # with a TP group: gathered to the full sequence
                n, hd = qkv.shape[0], spec.head_dim
                q, k, v = qkv.split([spec.heads * hd, spec.groups * hd, spec.groups * hd], dim=-1)
                q, k, v = q.reshape(n, spec.heads, hd), k.reshape(n, spec.groups, hd), v.reshape(n, spec.groups, hd)
                if spec.image_tokens:
                    a = _per_image(b.torch, self.core, (q, k, v), spec.image_tokens).reshape(n, 1, -1)
                else:
                    a = self.core(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1))
                return x + self.proj(a)

        return Block()


def _per_image(torch, core, qkv: tuple, img: int):
    """Attention within each image of `img` tokens, the last one shorter: the whole images as one
    batch (sbhd, an image's tokens strided by the batch: the same work as contiguous ones), the
    rest alone; out [tokens, heads x head dim] in the tokens' order."""
    n = qkv[0].shape[0]
    whole = n // img * img
    out = []
    if whole:
        out.append(core(*(t[:whole].reshape(img, whole // img, *t.shape[1:]) for t in qkv)).reshape(whole, -1))
    if whole < n:
        out.append(core(*(t[whole:].unsqueeze(1) for t in qkv)).reshape(n - whole, -1))
    return out[0] if len(out) == 1 else torch.cat(out)


def _gather(t, n: int):
    """The sequence-parallel all-gather of a duplicated module's output, as a copy on one GPU."""
    r = t.shape[0]
    return t if r == n else t.repeat(n // r, 1, 1)


class MlaBlock:
    @staticmethod
    def make(b: Bench, spec: Spec, fp8: dict[str, bool]):
        te, torch = b.te, b.torch
        mask = "causal" if spec.causal else "no_mask"
        mods = spec.modules
        qk_nope = spec.head_dim - spec.rope_dim
        kv_lora = mods["kv_up_proj"].in_features

        class Block(_module_base()):
            def __init__(self):
                super().__init__()
                if "q_down_proj" in mods:
                    self.q_down = b._linear(fp8, spec, "q_down_proj")
                    self.q_up = b._linear(fp8, spec, "q_up_proj", norm=True)
                else:
                    self.q_proj = b._linear(fp8, spec, "q_proj")
                self.kv_down = b._linear(fp8, spec, "kv_down_proj")
                self.kv_up = b._linear(fp8, spec, "kv_up_proj", norm=True)
                self.core = te.DotProductAttention(
                    spec.heads, (spec.head_dim, spec.v_head_dim), num_gqa_groups=spec.heads, attn_mask_type=mask, qkv_format="sbhd"
                )
                self.proj = b._linear(fp8, spec, "proj")

            def forward(self, x):
                n, h = x.shape[0], spec.heads
                if "q_down_proj" in mods:
                    q = self.q_up(_gather(self.q_down(x[: mods["q_down_proj"].rows]), n))
                else:
                    q = self.q_proj(x)
                ckv = _gather(self.kv_down(x[: mods["kv_down_proj"].rows]), n)
                c, k_pe = ckv.split([kv_lora, spec.rope_dim], dim=-1)
                kv = self.kv_up(c.contiguous()).reshape(n, 1, h, qk_nope + spec.v_head_dim)
                k_nope, v = kv.split([qk_nope, spec.v_head_dim], dim=-1)
                k = torch.cat([k_nope, k_pe.reshape(n, 1, 1, spec.rope_dim).expand(n, 1, h, spec.rope_dim)], dim=-1)
                a = self.core(q.reshape(n, 1, h, spec.head_dim), k, v.contiguous())
                return x + self.proj(a)

        return Block()


class DenseBlock:
    @staticmethod
    def make(b: Bench, spec: Spec, fp8: dict[str, bool]):
        torch = b.torch

        class Block(_module_base()):
            def __init__(self):
                super().__init__()
                self.fc1 = b._linear(fp8, spec, "fc1", norm=True)
                self.fc2 = b._linear(fp8, spec, "fc2")

            def forward(self, x):
                return x + self.fc2(_act(torch, self.fc1(x), spec.gated))

        return Block()


class MoeBlock:
    """Norm, router over every expert of the model, top-k; local experts are `index % local`, so
    this rank's grouped GEMMs get the plan's rows (tokens x top-k) with the router's imbalance.
    The token counts are synced to the host (`tolist`), as every dropless MoE trainer does, and
    each expert's rows are padded to 16 when its GEMMs run in FP8 (Megatron's
    `--moe-router-padding-for-fp8`)."""

    @staticmethod
    def make(b: Bench, spec: Spec, fp8: dict[str, bool]):
        torch = b.torch
        E, k, n_local = spec.num_experts, spec.topk, spec.local_experts
        shared = "shared.fc1" in spec.modules
        align = 16 if (fp8["experts.fc1"] or fp8["experts.fc2"]) else 1

        class Block(_module_base()):
            def __init__(self):
                super().__init__()
                self.norm = b._norm(spec)
                self.router = torch.nn.Linear(spec.hidden, E, bias=False, device=b.device, dtype=torch.bfloat16)
                self.fc1 = b._linear(fp8, spec, "experts.fc1", grouped=True)
                self.fc2 = b._linear(fp8, spec, "experts.fc2", grouped=True)
                if shared:
                    self.shared_fc1 = b._linear(fp8, spec, "shared.fc1")
                    self.shared_fc2 = b._linear(fp8, spec, "shared.fc2")

            def forward(self, x):
                n = x.shape[0]
                h = self.norm(x).reshape(n, spec.hidden)
                probs, idx = self.router(h).float().softmax(dim=-1).topk(k, dim=-1)
                local = (idx % n_local).flatten()
                order = local.argsort(stable=True)
                counts = torch.bincount(local, minlength=n_local)
                padded = (counts + align - 1) // align * align
                splits = padded.tolist()  # the token-count sync
                sorted_e = local[order]
                start = counts.cumsum(0) - counts
                pstart = padded.cumsum(0) - padded
                pos = torch.arange(n * k, device=h.device) - start[sorted_e] + pstart[sorted_e]
                token = order // k
                src = torch.zeros(sum(splits), dtype=torch.long, device=h.device)
                src[pos] = token
                y = self.fc2(_act(torch, self.fc1(h.index_select(0, src), splits), spec.gated), splits)
                w = probs.flatten()[order].unsqueeze(-1).to(y.dtype)
                out = torch.zeros_like(h).index_add(0, token, y.index_select(0, pos) * w)
                if shared:
                    out = out + self.shared_fc2(_act(torch, self.shared_fc1(h), spec.gated))
                return x + out.reshape(n, 1, spec.hidden)

        return Block()
