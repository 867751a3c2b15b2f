"""Advantage estimators and value targets.

Time-major conventions shared by `gae` and `vtrace`: every array is `[T, ...]`
with any trailing batch dims, and all arrays of one call have the same shape.

- `values[t]` is V(s_t).
- `next_values[t]` is the value of the true next observation of step t; when
  step t was truncated by a time limit it is the value of the final
  observation, not of the auto-reset observation that follows it.
- `discounts[t] = gamma * (1 - terminated[t])`: a termination does not
  bootstrap, a truncation does (with discount gamma).
- `continuations[t]` is 0 where step t ended its episode for any reason
  (termination or truncation) and 1 otherwise, so no recursion runs across an
  auto-reset boundary.

Hyper-parameters (`lambda_`, `rho_bar`, ...) are scalars, Python numbers or
traced, so they can be vmapped over. All outputs are stop-gradient: they are
regression targets and policy-gradient weights, never differentiated through.
"""

from vaco_jax.estimators.groups import (
    group_relative_advantages,
    off_policy_optimal_baseline,
    opob_advantages,
    per_sample_grad_sq_norms,
)
from vaco_jax.estimators.temporal import gae, vtrace

__all__ = [
    "gae",
    "group_relative_advantages",
    "off_policy_optimal_baseline",
    "opob_advantages",
    "per_sample_grad_sq_norms",
    "vtrace",
]
