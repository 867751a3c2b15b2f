"""GRPO learns on the token testbed: the reward it optimises rises in every seed, and held-out
greedy accuracy rises above the warm start in every seed.

The setting is the worked example of `docs/tokens.md` (`add` with 2 digits, the default model,
batch and calibrated warm start, temperature 0.7, learning rate 3e-4, synchronous generation) cut to 20
updates, 6 seeds vmapped, with the test suite's XLA settings on 2-core CPUs.

The calibrated warm start is trained to convergence, so it lands on its target accuracy (0.570
on the 128 held-out prompts) whatever the CPU; the test checks that first, within the
calibration's tolerance 0.03. Measured (2-core CPU, `experiments/results/tokens_calibration`):
after 20 updates seeds 0-9 reach 0.789 to 0.992, a gain of 0.219 to 0.422 (seeds 0-5: 0.219 to
0.368, mean 0.306), and every seed gains at least 0.38 by update 80. The test asks, in every
seed, for a higher mean reward over the last 5 updates than over the first 5 and a gain in final
held-out accuracy of at least 0.1, and for a mean gain over the seeds of at least 0.2. With the
advantages' sign flipped the same runs end at 0.000 to 0.055, their reward falling in every seed
(0.46-0.64 over the first 5 updates, 0.03-0.15 over the last 5), so a loss that pushes the wrong
way fails every check.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vaco_jax.run.warm_start import starting_trainer
from vaco_jax.tokens.config import TokenConfig, TokenHParams
from vaco_jax.tokens.train import TokenTrainer
from vaco_jax.tokens.warm_start import target_accuracy

CONFIG = TokenConfig(task="add", task_size=2, num_updates=20, eval_every=10)
SEEDS = (0, 1, 2, 3, 4, 5)
CALIBRATION_TOLERANCE = 0.03
MIN_GAIN = 0.1
MIN_MEAN_GAIN = 0.2


@pytest.mark.slow
def test_grpo_raises_reward_and_held_out_accuracy_above_the_warm_start_in_every_seed():
    trainer = starting_trainer(TokenTrainer(CONFIG))
    initial = trainer.init(jax.random.PRNGKey(0), TokenHParams.create())
    warm = float(trainer.evaluate(trainer.evaluated(initial), None))
    target = target_accuracy(CONFIG.warm_start, trainer.eval_prompts)
    assert abs(warm - target) <= CALIBRATION_TOLERANCE, (warm, target)

    hp = TokenHParams.create(temperature=0.7)
    hps = jax.tree.map(lambda x: jnp.broadcast_to(x, (len(SEEDS),)), hp)
    keys = jnp.stack([jax.random.PRNGKey(seed) for seed in SEEDS])
    state, metrics = jax.jit(jax.vmap(trainer.train))(keys, hps)

    assert not np.asarray(state.diverged).any()
    accuracy = np.asarray(metrics["eval_accuracy"])[:, CONFIG.eval_every - 1::CONFIG.eval_every]
    assert accuracy.shape == (len(SEEDS), CONFIG.num_periods)
    reward = np.asarray(metrics["reward_mean"])
    assert (reward[:, -5:].mean(axis=1) > reward[:, :5].mean(axis=1)).all(), reward
    gain = accuracy[:, -1] - warm
    assert (gain >= MIN_GAIN).all() and gain.mean() >= MIN_MEAN_GAIN, (warm, accuracy)
