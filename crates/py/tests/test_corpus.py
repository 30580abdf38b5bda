"""The convergence check's corpus: deterministic, seed- and stream-dependent, and learnable (its
bigram statistics carry far less entropy than a uniform draw)."""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import pytest

from adaptive_fp8.bench.corpus import Corpus


def test_the_same_seed_gives_the_same_tokens_and_another_does_not():
    a = list(Corpus(seed=3, vocab=512).sequences(256, 4))
    assert a == list(Corpus(seed=3, vocab=512).sequences(256, 4))
    assert a != list(Corpus(seed=4, vocab=512).sequences(256, 4))
    assert a != list(Corpus(seed=3, vocab=512).sequences(256, 4, stream=1))
    assert all(len(s) == 256 and all(0 <= t < 512 for t in s) for s in a)
    # A shorter sweep is a prefix of a longer one: the length does not reseed the stream.
    assert a[0][:8] == list(Corpus(seed=3, vocab=512).sequences(8, 1))[0]


def test_it_is_learnable_and_the_floor_is_its_entropy():
    c = Corpus(seed=0, vocab=256, fanout=4, period=8, lag=3)
    seqs = list(c.sequences(512, 16))
    # Copies at every period-th position.
    assert all(s[p] == s[p - 3] for s in seqs for p in range(8, 512, 8))
    # Empirical conditional entropy of the next token given the current one.
    pairs = defaultdict(Counter)
    for s in seqs:
        for a, b in zip(s, s[1:]):
            pairs[a][b] += 1
    n = sum(sum(c.values()) for c in pairs.values())
    h = -sum(k * math.log(k / sum(c.values())) for c in pairs.values() for k in c.values()) / n
    assert h < 0.5 * math.log(256)
    assert 0 < c.entropy_floor() < math.log(4)


def test_bad_parameters_say_what_is_needed():
    with pytest.raises(ValueError, match="fanout"):
        Corpus(vocab=4, fanout=8)
    with pytest.raises(ValueError, match="lag"):
        Corpus(period=4, lag=4)
    with pytest.raises(ValueError, match="seq_len"):
        list(Corpus().sequences(0, 1))
