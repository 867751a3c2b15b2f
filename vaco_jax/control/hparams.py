"""The control testbed's numeric hyper-parameters: pytree leaves, so one compiled program is
`jax.vmap`-ed over seeds and hyper-parameter values alike."""

from __future__ import annotations

from typing import Any

from flax import struct

from vaco_jax import losses
from vaco_jax.core.config import HParamsBase


@struct.dataclass
class ControlHParams(HParamsBase):
    """Numeric hyper-parameters; every field is a pytree leaf and may carry a leading vmap axis.

    `lag` is the parameter of the configured lag model: the (maximum) number of versions a
    behaviour policy lags behind the learner for `fixed`, `uniform`, `per_actor` and (at the
    start of a rollout) `in_flight`, the
    staleness bound `eta` for `bounded`, unused for `empirical`, and the
    success probability `p` of the truncated geometric distribution for `geometric`.
    """

    named_values = {"tv_delta": losses.TV_BUDGETS}

    learning_rate: Any = 3e-4
    clip_eps: Any = 0.2
    # VACO's TV budget, read under `ControlConfig.tv_delta_convention`: the paper's MuJoCo 0.2
    # (`losses.TV_BUDGETS` names it and the authors' other budgets).
    tv_delta: Any = 0.2
    lag: Any = 0.0
    gamma: Any = 0.99
    gae_lambda: Any = 0.95
    vtrace_lambda: Any = 1.0
    rho_bar: Any = 1.0
    c_bar: Any = 1.0
    rho_bar_pg: Any = 1.0
    is_cap: Any = 8.0
    ess_target: Any = 0.5
    kl_coef: Any = 0.2
    kl_target: Any = 0.01
    # The range of the adaptive KL coefficient: without it a KL the penalty cannot lower would
    # double or halve the coefficient without end.
    kl_coef_min: Any = 1e-4
    kl_coef_max: Any = 1e3
    entropy_coef: Any = 0.0
    value_coef: Any = 0.5
    max_grad_norm: Any = 0.5
    value_clip_eps: Any = 0.0  # PPO2's value clipping around the phase-start values; 0: off
    # The Gaussian policy's initial (state-independent) log standard deviation; a categorical
    # policy has none, so discrete tasks do not read it.
    init_log_std: Any = -0.5
    # sapo: the gate's temperatures for A > 0 and A <= 0 (verl's SAPO defaults).
    sapo_tau_pos: Any = 1.0
    sapo_tau_neg: Any = 1.05
    # icepop: the band of the staleness pi_T/beta kept (the Ring-1T paper's alpha and beta).
    icepop_low: Any = 0.5
    icepop_high: Any = 5.0
    # kl_cov: the penalty's coefficient and the share of samples it selects (the authors' 7B
    # script: 0.2 percent, ppo_kl_coef 1).
    kl_cov_coef: Any = 1.0
    kl_cov_fraction: Any = 0.002
