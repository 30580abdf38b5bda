"""Megatron's CUDA-graph memory pools, given back after its graphs are deleted (the Megatron
judge's workaround for a pool that megatron-core 0.19.2 never releases). Pure: the allocator
call is passed in, so the CPU tests run it without torch."""

from __future__ import annotations

import collections


class GraphPoolLedger:
    """The references Megatron's static graph buffers take on its graph memory pools, given
    back once the graphs are deleted.

    Why: megatron-core 0.19.2's ``alloc_tensor_from_graph_mempool`` allocates each graph's
    static inputs, outputs and output grads into ``CudaGraphManager.global_mempool`` between
    ``_cuda_beginAllocateCurrentThreadToPool`` and ``_cuda_endAllocateToPool``. The first takes
    a reference on the pool (PyTorch's caching allocator: ``create_or_incref_pool``); only
    ``_cuda_releasePool`` gives one back, which PyTorch's own CUDA-graph trees call after each
    such block and Megatron never does. ``delete_cuda_graphs()`` then leaves every pool it
    used referenced, so none is ever freed: the oracle, one pool per captured pair, ran
    Qwen2.5-72B (1 layer, 4096 tokens, graphed) out of memory with 103 GiB in private pools
    (docs/device-logs/default_judge/retune-step/). ``count`` wraps Megatron's allocator, by
    the module-level name its callers look up at each call; ``give_back`` releases what it
    counted."""

    def __init__(self, release) -> None:
        self.release = release  # (pool) -> None: torch._C._cuda_releasePool on this device
        self.taken: collections.Counter = collections.Counter()

    def count(self, cuda_graphs) -> None:
        """Wraps ``cuda_graphs.alloc_tensor_from_graph_mempool`` (once per module)."""
        original = cuda_graphs.alloc_tensor_from_graph_mempool
        if getattr(original, "_counted_by_ledger", False):
            return
        manager = cuda_graphs.CudaGraphManager

        def counted(meta):
            pool = manager.global_mempool
            # Counted once it returns: after a failed one, a release too few only keeps that
            # pool (as before), where one too many would trip the allocator's assert.
            out = original(meta)
            if pool is not None:
                self.taken[pool] += 1
            return out

        counted._counted_by_ledger = True
        cuda_graphs.alloc_tensor_from_graph_mempool = counted

    def give_back(self) -> int:
        """Releases each counted reference once; returns how many. A release the allocator
        refuses (the pool already gone) stops that pool's and is not retried."""
        given = 0
        for pool, n in self.taken.items():
            for _ in range(n):
                try:
                    self.release(pool)
                except (RuntimeError, TypeError):
                    break
                given += 1
        self.taken.clear()
        return given
