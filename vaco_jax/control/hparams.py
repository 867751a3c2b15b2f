"""The control testbed's numeric hyper-parameters: the knobs every run reads, declared here, and
those of each algorithm's estimator and loss (`vaco_jax.control.algorithms`); a run holds its
own as pytree leaves, so one compiled program is `jax.vmap`-ed over seeds and values alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar


from vaco_jax.control.algorithms import ALGORITHMS, GAE, VTRACE_PHASE, Algorithm
from vaco_jax.core import knobs
from vaco_jax.core.config import HParamsBase
from vaco_jax.core.knobs import Knob
from vaco_jax.core.lag_models import LAG

LEARNING_RATE = Knob("learning_rate", 3e-4, "Adam's step size", "(0, inf)")
GAMMA = Knob("gamma", 0.99, "the discount", "[0, 1]")
ENTROPY_COEF = Knob("entropy_coef", 0.0, "the entropy bonus's coefficient", "[0, inf)")
VALUE_COEF = Knob("value_coef", 0.5, "the value loss's coefficient", "[0, inf)")
MAX_GRAD_NORM = Knob("max_grad_norm", 0.5, "the gradient norm clipped to (`grad_clip`)",
                     "(0, inf)")
VALUE_CLIP_EPS = Knob("value_clip_eps", 0.0, "PPO2's value clipping around the phase-start "
                      "values; 0: off", "[0, inf)")
# A categorical policy has no standard deviation, so a discrete task does not use it.
INIT_LOG_STD = Knob("init_log_std", -0.5, "the Gaussian policy's initial (state-independent) "
                    "log standard deviation")
EVERY_RUN_KNOBS = (LEARNING_RATE, LAG, GAMMA, ENTROPY_COEF, VALUE_COEF, MAX_GRAD_NORM,
                   VALUE_CLIP_EPS, INIT_LOG_STD)
"""What every control run reads (`init_log_std` for a Gaussian policy)."""

KL_COEF = Knob("kl_coef", 0.2, "the KL penalty's initial coefficient", "[0, inf)")
KL_TARGET = Knob("kl_target", 0.01, "the phase KL the coefficient adapts to", "[0, inf)")
# The range of the adaptive KL coefficient: without it a KL the penalty cannot lower would
# double or halve the coefficient without end.
KL_COEF_MIN = Knob("kl_coef_min", 1e-4, "the adaptive coefficient's floor", "(0, inf)",
                   at_most="kl_coef_max")
KL_COEF_MAX = Knob("kl_coef_max", 1e3, "the adaptive coefficient's ceiling")
KL_KNOBS = (KL_COEF, KL_TARGET, KL_COEF_MIN, KL_COEF_MAX)
"""What an adaptive-KL algorithm's runs read: its penalty's coefficient and its adaptation."""
ESS_TARGET = Knob("ess_target", 0.5, "the ESS ratio below which an ESS-scaled step shrinks",
                  "(0, inf)")


def algorithm_knobs(algorithm: Algorithm) -> tuple[Knob, ...]:
    """The knobs a run of `algorithm` reads beyond every run's: its estimator's, its loss's, its
    KL penalty's and its ESS step scaling's."""
    return (*algorithm.advantages.knobs, *algorithm.knobs,
            *(KL_KNOBS if algorithm.adaptive_kl else ()),
            *((ESS_TARGET,) if algorithm.ess_scaling else ()))


class ControlHParams(HParamsBase):
    """A control run's knobs, each a float leaf that may carry a leading vmap axis."""

    recorded: ClassVar[tuple[str, ...]] = (
        "learning_rate", "clip_eps", "tv_delta", "lag", "gamma", "gae_lambda", "vtrace_lambda",
        "rho_bar", "c_bar", "rho_bar_pg", "is_cap", "ess_target", "kl_coef", "kl_target",
        "kl_coef_min", "kl_coef_max", "entropy_coef", "value_coef", "max_grad_norm",
        "value_clip_eps", "init_log_std", "sapo_tau_pos", "sapo_tau_neg", "icepop_low",
        "icepop_high", "kl_cov_coef", "kl_cov_fraction")

    @classmethod
    def knob_table(cls) -> Mapping[str, Knob]:
        every = [*EVERY_RUN_KNOBS, *KL_KNOBS, ESS_TARGET, *GAE.knobs, *VTRACE_PHASE.knobs]
        return knobs.by_name([*every, *(k for a in ALGORITHMS.values() for k in a.knobs)])
