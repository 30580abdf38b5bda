"""The pool probe's matching of live private-pool blocks to tensors (pure, no torch)."""

from adaptive_fp8.bench.pool_probe import Block, attribute, block_of, live_pool_blocks, summary

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


def test_tensors_are_matched_to_the_block_their_storage_lies_in():
    blocks = live_pool_blocks(SNAPSHOT)
    assert block_of(blocks, 1050) == 0 and block_of(blocks, 1249) == 0
    assert block_of(blocks, 1250) == 1 and block_of(blocks, 1550) is None
    assert block_of(blocks, 10) is None
    # Two tensors in the first block count it once; nothing in the second: unowned.
    by_label, unowned = attribute(blocks, [(1060, "a"), (1100, "b"), (50, "outside")])
    assert by_label == {"a": 200} and unowned == 300
    text = summary(blocks, by_label, unowned)
    assert text.splitlines()[0].startswith("pool probe: 1 private pool(s)")
    assert "a" in text.splitlines()[1]
