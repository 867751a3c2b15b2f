"""M2PO's clip bounds as its authors' code solves them: the second moment of the harmful tokens'
log-ratios capped at the budget, against hand-computed values, with and without `jit`."""

import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax import losses

# Sequence 0 has A > 0, sequence 1 A < 0. Harmful (the step moves r further from 1): 0.12 and
# 0.3 of sequence 0, -0.4 and -0.05 of sequence 1; -0.2 (A > 0) and 0.2 (A < 0) are not.
LOG_RATIO = jnp.asarray([[0.12, 0.3, -0.2], [-0.4, 0.2, -0.05]])
ADVANTAGES = jnp.asarray([[1.0] * 3, [-1.0] * 3])


def test_tau_is_the_breakpoint_below_the_budget_over_harmful_tokens_only(call):
    (low, high), metrics = call(losses.m2po_clip_bounds, LOG_RATIO, ADVANTAGES, 0.04)
    # Harmful (log r)^2 sorted: 0.0025, 0.0144, 0.09, 0.16; mean 0.0667 > 0.04, so the target
    # sum is 0.16. Capped at each breakpoint the sums are 0.01, 0.0457, 0.1969: the third is the
    # first to reach 0.16, so tau^2 is the breakpoint below it, 0.0144. (The exact root would
    # be tau^2 = 0.0716; counting every token, tau^2 = 0.04.)
    assert float(metrics["tau"]) == pytest.approx(0.12, rel=1e-5)
    assert float(metrics["m2"]) == pytest.approx(0.2669 / 4, rel=1e-5)
    assert float(metrics["m2_capped"]) == pytest.approx((0.0025 + 3 * 0.0144) / 4, rel=1e-5)
    assert float(metrics["harmful_fraction"]) == pytest.approx(4 / 6)
    assert float(low) == pytest.approx(1 - np.exp(-0.12), rel=1e-5)
    assert float(high) == pytest.approx(np.expm1(0.12), rel=1e-5)


def test_within_the_budget_nothing_is_clipped(call):
    (low, high), metrics = call(losses.m2po_clip_bounds, LOG_RATIO, ADVANTAGES, 0.07)
    assert float(metrics["tau"]) == losses.MAX_LOG_RATIO
    assert float(low) == pytest.approx(1.0) and float(high) > np.exp(19)
    # No harmful token at all (every step pulls its ratio back to 1): no clip either.
    (_, high), metrics = call(losses.m2po_clip_bounds, LOG_RATIO, -ADVANTAGES, 1e-6,
                              jnp.asarray([[1.0, 1.0, 0.0], [1.0, 0.0, 1.0]]))
    assert float(metrics["harmful_fraction"]) == 0.0 and float(high) > np.exp(19)


def test_masked_tokens_are_not_counted(call):
    # Without 0.3 the harmful (log r)^2 are 0.0025, 0.0144, 0.16 (mean 0.059 > 0.04, target
    # 0.12): capped sums 0.0075, 0.0313, 0.1769, so tau^2 = 0.0144 again, over three tokens.
    mask = jnp.asarray([[1.0, 0.0, 1.0], [1.0, 1.0, 1.0]])
    _, metrics = call(losses.m2po_clip_bounds, LOG_RATIO, ADVANTAGES, 0.04, mask)
    assert float(metrics["tau"]) == pytest.approx(0.12, rel=1e-5)
    assert float(metrics["harmful_fraction"]) == pytest.approx(3 / 5)
