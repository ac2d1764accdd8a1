"""Paired significance tests over per-query scores of two runs on the same queries.

``paired_p_value`` answers "could the difference in mean between these two runs be chance?"
for scores listed in the same query order. Two tests:

- ``"fisher"`` (default): Fisher's randomization test, the usual choice in IR (Smucker et al.,
  CIKM 2007): the sign of each query's difference is flipped at random and the p-value is
  the share of flips whose |mean difference| reaches the observed one. It is scipy's
  ``permutation_test`` with ``permutation_type="samples"``, seeded, so the same inputs always
  give the same p-value. (ranx's ``fisher_randomization_test`` is the same test, but it
  draws its permutations in numba threads that ignore the seed, so its p-values change from
  call to call; we use scipy's for reproducible reports.)
- ``"student"``: the two-sided paired t-test (scipy's ``ttest_rel``, which is also what
  ranx's ``compare(stat_test="student")`` calls).

Identical score lists get p = 1.0 under both tests (the t-test alone would return NaN).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

Test = Literal["fisher", "student"]
TESTS: tuple[str, ...] = ("fisher", "student")
SEED = 42  # ranx's default seed
N_RESAMPLES = 10_000
_BATCH = 500  # resamples held in memory at once: bounds memory on tasks with many queries


def paired_p_value(
    control: Sequence[float],
    treatment: Sequence[float],
    test: Test = "fisher",
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
) -> float:
    """Two-sided p-value that ``treatment`` and ``control`` have the same mean score.

    Both sequences hold one score per query, in the same query order.
    """
    a = np.asarray(control, dtype=float)
    b = np.asarray(treatment, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired scores need equal 1-d shapes, got {a.shape} and {b.shape}")
    if test not in TESTS:
        raise ValueError(f"test must be one of {TESTS}, got {test!r}")
    if len(a) == 0 or np.array_equal(a, b):
        return 1.0
    from scipy import stats  # 0.6 s to import: only a comparison that tests pays for it

    if test == "student":
        return float(stats.ttest_rel(b, a, alternative="two-sided").pvalue)
    result = stats.permutation_test(
        (b, a),
        _mean_difference,
        permutation_type="samples",
        vectorized=True,
        n_resamples=n_resamples,
        batch=_BATCH,
        alternative="two-sided",
        rng=seed,
    )
    return float(result.pvalue)


def _mean_difference(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    return np.mean(x - y, axis=axis)
