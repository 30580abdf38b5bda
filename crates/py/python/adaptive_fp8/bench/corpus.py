"""A deterministic synthetic corpus with structure a small model can learn (pure Python, no
download, no torch), for the convergence check: the same seed gives the same tokens on any
machine.

Each token is drawn from a sparse Markov chain: every token has `fanout` successors with
Zipf-like weights, so the next token is predictable from the current one; every `period`-th
position copies the token `lag` places back, a longer-range pattern attention can learn. The
entropy rate of the chain (`entropy_floor`) is the loss a perfect model approaches.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Iterator


@dataclass(frozen=True)
class Corpus:
    """The chain: `vocab` tokens, each with `fanout` weighted successors, and the copy rule."""

    seed: int = 0
    vocab: int = 4096
    fanout: int = 8
    period: int = 16
    lag: int = 7

    def __post_init__(self) -> None:
        if self.vocab < 2 or not (1 <= self.fanout <= self.vocab):
            raise ValueError(f"vocab {self.vocab} and fanout {self.fanout}: need vocab >= 2 and 1 <= fanout <= vocab")
        if self.period < 2 or not (1 <= self.lag < self.period):
            raise ValueError(f"period {self.period} and lag {self.lag}: need period >= 2 and 1 <= lag < period")

    def _table(self) -> tuple[list[list[int]], list[float]]:
        rng = random.Random(self.seed)
        succ = [rng.sample(range(self.vocab), self.fanout) for _ in range(self.vocab)]
        w = [1.0 / (i + 1) for i in range(self.fanout)]
        total = sum(w)
        return succ, [x / total for x in w]

    def entropy_floor(self) -> float:
        """Nats per token of the best predictor (the chain's positions, plus the exact copies)."""
        _, p = self._table()
        h = -sum(x * math.log(x) for x in p)
        return h * (self.period - 1) / self.period

    def sequences(self, seq_len: int, count: int, stream: int = 0) -> Iterator[list[int]]:
        """`count` sequences of `seq_len` tokens; `stream` picks an independent stream (one per
        data-parallel rank or split)."""
        if seq_len < 1 or count < 0:
            raise ValueError(f"seq_len {seq_len} and count {count}: need seq_len >= 1 and count >= 0")
        succ, p = self._table()
        cum = [sum(p[: i + 1]) for i in range(len(p))]
        rng = random.Random(f"{self.seed}/{stream}")
        for _ in range(count):
            tok = rng.randrange(self.vocab)
            seq = [tok]
            for pos in range(1, seq_len):
                if pos % self.period == 0 and pos >= self.lag:
                    tok = seq[pos - self.lag]
                else:
                    u = rng.random()
                    tok = succ[tok][next(i for i, c in enumerate(cum) if u <= c or i == len(cum) - 1)]
                seq.append(tok)
            yield seq
