import jax
import jax.numpy as jnp
import numpy as np

from vaco_jax.tokens import tasks
from vaco_jax.tokens.model import ModelSpec, TokenPolicy, to_bfloat16

SPEC = ModelSpec(layers=2, width=32, heads=4, context=16)
TASK = tasks.make_task("add", 2)


class JittedPolicy(TokenPolicy):
    """The policy with its entry points compiled: the tests run them once each."""

    def __init__(self, spec):
        super().__init__(spec)
        self.sample = jax.jit(super().sample, static_argnames=("length", "greedy"))
        self.response_log_probs = jax.jit(super().response_log_probs)
        self.logits = jax.jit(super().logits)


def setup(batch=16):
    policy = JittedPolicy(SPEC)
    params = policy.init(jax.random.PRNGKey(0))
    prompt, _ = tasks.sample(TASK, jax.random.PRNGKey(1), batch)
    return policy, params, prompt


def test_sampled_log_probs_equal_teacher_forced():
    policy, params, prompt = setup()
    temperature = jnp.asarray(1.3)
    samples = policy.sample(params, prompt, jax.random.PRNGKey(2), length=6,
                            temperature=temperature)
    log_probs, entropy = policy.response_log_probs(params, prompt, samples.response, temperature)
    # An untrained policy ends some responses early, so masking is exercised.
    assert 0 < samples.mask.mean() < 1
    np.testing.assert_allclose(samples.log_prob, log_probs, atol=2e-5)
    np.testing.assert_allclose(samples.entropy, entropy, atol=2e-5)
    assert jnp.all(samples.log_prob[samples.mask == 0] == 0)
    assert jnp.all(samples.response[samples.mask == 0] == tasks.PAD)
    # Entropy is that of the tempered distribution: positive and at most log |V|.
    valid = samples.mask == 1
    assert jnp.all(entropy[valid] > 0) and jnp.all(entropy[valid] <= np.log(tasks.VOCAB_SIZE))


def test_masked_positions_contribute_nothing():
    policy, params, prompt = setup(4)
    response = jnp.array([[1, 2, tasks.EOS, tasks.PAD, tasks.PAD]] * 4, jnp.int32)
    garbage = response.at[:, 3:].set(jnp.array([5, 7]))
    temperature = jnp.asarray(1.0)
    clean = policy.response_log_probs(params, prompt, response, temperature)[0]
    dirty = policy.response_log_probs(params, prompt, garbage, temperature)[0]
    np.testing.assert_array_equal(clean, dirty)
    assert jnp.all(clean[:, 3:] == 0) and jnp.all(clean[:, :3] < 0)

    def total(p):
        return policy.response_log_probs(p, prompt, response, temperature)[0][:, 3:].sum()
    grads = jax.jit(jax.grad(total))(params)
    assert all(float(jnp.abs(g).max()) == 0.0 for g in jax.tree.leaves(grads))


def test_temperature_and_greedy():
    policy, params, prompt = setup()
    greedy = policy.sample(params, prompt, jax.random.PRNGKey(3), length=6,
                           temperature=jnp.asarray(1.0), greedy=True)
    first = jnp.argmax(policy.logits(params, prompt)[:, -1], axis=-1)
    np.testing.assert_array_equal(greedy.response[:, 0], first)
    cold = policy.sample(params, prompt, jax.random.PRNGKey(3), length=6,
                         temperature=jnp.asarray(1e-3))
    np.testing.assert_array_equal(cold.response, greedy.response)


def test_bfloat16_behaviour_differs_slightly():
    policy, params, prompt = setup()
    temperature = jnp.asarray(1.0)
    samples = policy.sample(to_bfloat16(params), prompt, jax.random.PRNGKey(4), length=6,
                            temperature=temperature)
    exact = policy.response_log_probs(params, prompt, samples.response, temperature)[0]
    gap = jnp.abs(samples.log_prob - exact)
    assert 0 < gap.max() < 0.1
