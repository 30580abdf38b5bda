"""CPU only: how many paired timings the greedy oracle search spends, with a trial's early stop
(``step_common.faster_beyond_noise``) and without it, on the test suite's step-time stand-in
(four groups, each a 0.1% gain under 5% noise: every trial a tie), and how often each stays
all-BF16. docs/PERFORMANCE.md quotes its output.

    PYTHONPATH=<site with adaptive_fp8> python scripts/checks/oracle_early_stop.py [seeds]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "crates/py/tests"))

from adaptive_fp8.bench import step_common as sc  # noqa: E402
from test_step_bench import GROUPS, FakeStep  # noqa: E402


def every_pair(ratio, repeats: int):
    ratios = [ratio() for _ in range(repeats)]
    return ratios, sc.verdict(ratios) == "faster"


def runs(seeds: int) -> tuple[float, float]:
    bf16 = pairs = 0
    for seed in range(1, seeds + 1):
        step = FakeStep(dict.fromkeys(GROUPS, -0.01), noise=0.05, seed=seed)
        best, trials = sc.search_oracle(step.pair, 7, GROUPS)
        bf16 += sc.key(best) == "-"
        pairs += sum(t["pairs"] for t in trials)
    return pairs / seeds, bf16 / seeds


def main() -> None:
    seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    early = runs(seeds)
    stop = sc.faster_beyond_noise
    sc.faster_beyond_noise = every_pair
    try:
        full = runs(seeds)
    finally:
        sc.faster_beyond_noise = stop
    print("| trial | pairs per search | all-BF16 |\n|---|---:|---:|")
    print(f"| every pair | {full[0]:.1f} | {full[1]:.1%} |\n| early stop | {early[0]:.1f} | {early[1]:.1%} |")


if __name__ == "__main__":
    main()
