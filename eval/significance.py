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
Where a test has no answer there is no p-value, and `paired_test` says why (`PairedTest`):
fewer than `MIN_QUERIES` paired queries (one query's sign flip is its own mirror, and
scipy refuses one observation), or, for the t-test, differences that are all the same and
not zero (no variance: the t statistic is infinite).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

Test = Literal["fisher", "student"]
TESTS: tuple[str, ...] = ("fisher", "student")
SEED = 42  # ranx's default seed
N_RESAMPLES = 10_000
_BATCH = 500  # resamples held in memory at once: bounds memory on tasks with many queries
MIN_QUERIES = 2  # paired queries either test needs


class NoTest(ValueError):
    """Paired scores a test has no p-value for; the message says why (one short clause)."""


@dataclass(frozen=True)
class PairedTest:
    """A test's p-value, or None and why there is none (``"1 paired query; ..."``)."""

    p_value: float | None
    reason: str = ""

    def text(self, spec: str = ".3g") -> str:
        """The p-value as ``spec`` formats it, or ``n/a (why)``."""
        return f"n/a ({self.reason})" if self.p_value is None else format(self.p_value, spec)

    @property
    def significant(self) -> bool:
        return self.p_value is not None and self.p_value < 0.05


def paired_test(
    control: Sequence[float],
    treatment: Sequence[float],
    test: Test = "fisher",
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
) -> PairedTest:
    """`paired_p_value`, or no p-value and the reason where the test has none."""
    try:
        return PairedTest(paired_p_value(control, treatment, test, n_resamples, seed))
    except NoTest as e:
        return PairedTest(None, str(e))


def paired_p_value(
    control: Sequence[float],
    treatment: Sequence[float],
    test: Test = "fisher",
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
) -> float:
    """Two-sided p-value that ``treatment`` and ``control`` have the same mean score.

    Both sequences hold one score per query, in the same query order. `NoTest` (saying
    why) where the test has no p-value: see the module docstring.
    """
    a = np.asarray(control, dtype=float)
    b = np.asarray(treatment, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired scores need equal 1-d shapes, got {a.shape} and {b.shape}")
    if test not in TESTS:
        raise ValueError(f"test must be one of {TESTS}, got {test!r}")
    if len(a) < MIN_QUERIES:
        n = f"{len(a)} paired quer{'y' if len(a) == 1 else 'ies'}"
        raise NoTest(f"{n}; a paired test needs at least {MIN_QUERIES}")
    if np.array_equal(a, b):
        return 1.0
    differences = b - a
    if test == "student" and np.allclose(differences, differences[0], rtol=1e-9, atol=1e-12):
        raise NoTest("every query's difference is the same; the t-test needs them to vary")
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
