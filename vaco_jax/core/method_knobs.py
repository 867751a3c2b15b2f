"""The knobs of the lag-robust methods of 2025-26 that both testbeds run (SAPO, IcePop,
KL-Cov), declared once so that the two testbeds cannot disagree on a default or a range."""

from __future__ import annotations

from vaco_jax.core.knobs import Knob

SAPO_TAU_POS = Knob("sapo_tau_pos", 1.0, "sapo: the soft gate's temperature for A > 0 (verl's "
                    "and the SAPO script's value)", "(0, inf)")
SAPO_TAU_NEG = Knob("sapo_tau_neg", 1.05, "sapo: the soft gate's temperature for A <= 0",
                    "(0, inf)")
ICEPOP_LOW = Knob("icepop_low", 0.5, "icepop: the lower end of the band of the staleness "
                  "pi_T/beta kept (the Ring-1T paper's alpha)", "[0, 1]")
ICEPOP_HIGH = Knob("icepop_high", 5.0, "icepop: the upper end of that band (the Ring-1T "
                   "paper's beta)", "[1, inf)")
KL_COV_COEF = Knob("kl_cov_coef", 1.0, "kl_cov: the penalty's coefficient (the authors' 7B "
                   "script: ppo_kl_coef 1)", "[0, inf)")
KL_COV_FRACTION = Knob("kl_cov_fraction", 0.002, "kl_cov: the share of samples (tokens) of "
                       "largest covariance it penalises (the authors' 7B script: k_percent "
                       "0.2, i.e. 0.002)", "(0, 1]")
