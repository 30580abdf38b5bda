"""The pool probe's matching of live private-pool blocks to tensors (pure, no torch)."""

from adaptive_fp8.bench.pool_probe import Block, attribute, block_of, live_pool_blocks, pool_reserved, summary

SNAPSHOT = [
    # The default pool: never counted.
    {"segment_pool_id": (0, 0), "address": 0, "blocks": [{"size": 100, "state": "active_allocated"}]},
    # A private pool: a free block, then two live ones.
    {"segment_pool_id": (1, 7), "address": 1000, "blocks": [
        {"size": 50, "state": "inactive"},
        {"size": 200, "state": "active_allocated"},
        {"size": 300, "state": "active_allocated"}]},
]


def test_only_live_blocks_of_private_pools_count():
    assert live_pool_blocks(SNAPSHOT) == [Block(1050, 200, (1, 7)), Block(1250, 300, (1, 7))]


def test_a_pool_with_only_free_blocks_still_counts_as_reserved():
    # A released graph's pool that its owner still references: nothing live, all of it held.
    kept = {"segment_pool_id": (1, 9), "address": 5000, "total_size": 2 << 30,
            "blocks": [{"size": 2 << 30, "state": "inactive"}]}
    snap = SNAPSHOT + [kept]
    assert pool_reserved(snap) == {(1, 7): 550, (1, 9): 2 << 30}
    assert all(b.pool != (1, 9) for b in live_pool_blocks(snap))
    line = summary(live_pool_blocks(snap), {}, 500, pool_reserved(snap)).splitlines()[0]
    assert line.startswith("pool probe: 2 private pool(s) holding 2.00 GiB reserved; 1 with live blocks")


def test_tensors_are_matched_to_the_block_their_storage_lies_in():
    blocks = live_pool_blocks(SNAPSHOT)
    assert block_of(blocks, 1050) == 0 and block_of(blocks, 1249) == 0
    assert block_of(blocks, 1250) == 1 and block_of(blocks, 1550) is None
    assert block_of(blocks, 10) is None
    # Two tensors in the first block count it once; nothing in the second: unowned.
    by_label, unowned = attribute(blocks, [(1060, "a"), (1100, "b"), (50, "outside")])
    assert by_label == {"a": 200} and unowned == 300
    text = summary(blocks, by_label, unowned, pool_reserved(SNAPSHOT))
    assert text.splitlines()[0].startswith("pool probe: 1 private pool(s) holding 0.00 GiB reserved; 1 with live")
    assert "a" in text.splitlines()[1]


def test_holders_names_what_refers_to_each_target_in_two_passes():
    import gc
    import inspect

    from adaptive_fp8.bench.pool_probe import holders

    class Buffer:
        pass

    class Layer:
        def __init__(self, b):
            self.held = [b]  # a container: named with what holds it

    class Runner:
        def __init__(self, b):
            self.b = b

    a, b = Buffer(), Buffer()
    keep = (Layer(a), Runner(b))
    named = holders([a, b], gc, inspect)
    assert "list<-" in named[0] and "Layer" in named[0], named
    assert "Runner" in named[1], named
    assert keep  # the holders stay alive through the call


def test_report_runs_end_to_end_on_a_stand_in_torch():
    import gc
    import types

    from adaptive_fp8.bench.pool_probe import report

    class Storage:
        def __init__(self, ptr):
            self.ptr = ptr

        def data_ptr(self):
            return self.ptr

    class Tensor:
        is_cuda = True
        dtype = "torch.bfloat16"

        def __init__(self, ptr, shape):
            self.ptr, self.shape = ptr, shape

        def untyped_storage(self):
            return Storage(self.ptr)

    class Holder:
        def __init__(self, t):
            self.t = t

    cuda = types.SimpleNamespace(memory_snapshot=lambda: SNAPSHOT)
    torch = types.SimpleNamespace(Tensor=Tensor, cuda=cuda)
    keep = [Holder(Tensor(1260, (4, 8))), Tensor(5, (1,))]  # in the second live block; outside
    text = report(torch, gc)
    lines = text.splitlines()
    assert lines[0].startswith(
        "pool probe: 1 private pool(s) holding 0.00 GiB reserved; 1 with live blocks, 0.00 GiB live in 2 block(s)"
    ), text
    assert "(4, 8) bfloat16 held by Holder" in lines[1], text
    assert len(lines) == 2 and keep
