"""A vaco_jax plugin: PPO and GRPO with the dual clip of Ye et al. 2020 ("Mastering complex
control in MOBA games with deep reinforcement learning"), which also bounds the objective of a
negative advantage from below at `dual_clip x A`, so one very large ratio cannot dominate a batch.

Installed (`pip install -e docs/examples/dual_clip_plugin`), its entry point of group
`vaco_jax.algorithms` registers `ppo_dual_clip` on the control testbed and `grpo_dual_clip` on the
token testbed; both then train in `vaco-jax train`, `tokens` and `sweep` like built-in ones, and
their knob `dual_clip` is swept like a built-in one (`[hparams] dual_clip = [2.0, 3.0]`,
`--hparam dual_clip=2`).
"""

from vaco_jax import losses
from vaco_jax.control import algorithms as control
from vaco_jax.core.knobs import Knob
from vaco_jax.tokens import algorithms as tokens
from vaco_jax.tokens import surrogates

DUAL_CLIP = Knob("dual_clip", 3.0, "the paper's c: a negative advantage's objective is floored "
                 "at c A", "(1, inf)")


def ppo_dual_clip(t: control.PolicyTerms, hp):
    """PPO-clip on the behaviour ratio with the dual clip (the control testbed's `[T, B]`)."""
    return losses.ppo_clip_loss(t.log_prob - t.behaviour_log_prob, t.advantages, hp.clip_eps,
                                dual_clip=hp.dual_clip)


def grpo_dual_clip(t: surrogates.TokenTerms, hp):
    """GRPO's token-level PPO-clip with the dual clip (the token testbed's `[N, L]`)."""
    loss, metrics = losses.ppo_clip_loss(t.behaviour_log_ratio, t.token_advantages, hp.clip_eps,
                                         mask=t.mask, aggregation=t.aggregation,
                                         dual_clip=hp.dual_clip)
    return loss, {"clip_fraction": metrics["clip_fraction"]}


def register_all() -> None:
    """The entry point: registers both algorithms."""
    control.ALGORITHMS.register(control.Algorithm(
        "ppo_dual_clip", control.GAE, ppo_dual_clip, knobs=(control.CLIP_EPS, DUAL_CLIP),
        metrics=(control.CLIP_FRACTION,),
        description="PPO-clip on pi_theta/beta with Ye et al.'s dual clip (knob dual_clip)"))
    tokens.ALGORITHMS.register(tokens.TokenAlgorithm(
        "grpo_dual_clip", surrogates.group_relative, grpo_dual_clip,
        knobs=(surrogates.CLIP_EPS, DUAL_CLIP), metrics=(surrogates.CLIP_FRACTION,),
        description="GRPO's token-level PPO-clip with Ye et al.'s dual clip (knob dual_clip)",
        source="Ye et al. 2020 (dual-clip PPO); a vaco_jax plugin example"))
