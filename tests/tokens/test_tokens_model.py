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


def _snapshots(policy, count):
    return jax.tree.map(lambda *leaves: jnp.stack(leaves),
                        *[policy.init(jax.random.PRNGKey(10 + i)) for i in range(count)])


def _engine_log_probs(policy, snapshots, slots, prompt, response, temperature):
    """The reference: one cache fed token by token, each forward pass with the snapshot that
    draws the next token, and the log-prob of each recorded token read off its logits."""
    take = lambda k: jax.tree.map(lambda stack: stack[k], snapshots)
    cache = policy.empty_cache(prompt.shape[0])
    logits, cache = policy.module.apply(take(slots[0]), prompt, jnp.arange(prompt.shape[1]),
                                        cache)
    out = []
    for t in range(response.shape[1]):
        scaled = jax.nn.log_softmax(logits[:, -1] / temperature, axis=-1)
        out.append(jnp.take_along_axis(scaled, response[:, t, None], axis=-1)[:, 0])
        following = slots[min(t + 1, len(slots) - 1)]
        logits, cache = policy.module.apply(take(following), response[:, t:t + 1],
                                            jnp.array([prompt.shape[1] + t]), cache)
    return jnp.stack(out, axis=1)


def test_a_shared_cache_records_the_engine_log_prob_of_each_token():
    policy, _, prompt = setup()
    snapshots, temperature = _snapshots(policy, 3), jnp.asarray(1.2)
    slots = jnp.array([0, 0, 1, 1, 2, 2])
    sample = jax.jit(policy.sample_shared_cache, static_argnames="length")
    samples = sample(snapshots, slots, prompt, jax.random.PRNGKey(2), length=6,
                     temperature=temperature)
    expected = _engine_log_probs(policy, snapshots, slots, prompt, samples.response, temperature)
    np.testing.assert_allclose(samples.log_prob, expected * samples.mask, atol=2e-5)
    # The first tokens come from snapshot 0 over a prefix it wrote itself: its teacher-forced
    # log-probs. Later ones attend to keys an older snapshot wrote: not snapshot 2's own.
    first = jax.tree.map(lambda stack: stack[0], snapshots)
    own_first, _ = policy.response_log_probs(first, prompt, samples.response, temperature)
    np.testing.assert_allclose(samples.log_prob[:, :2], own_first[:, :2], atol=2e-5)
    last = jax.tree.map(lambda stack: stack[2], snapshots)
    own_last, _ = policy.response_log_probs(last, prompt, samples.response, temperature)
    valid = samples.mask[:, 4:] == 1
    assert valid.any()
    assert np.abs(np.asarray(samples.log_prob[:, 4:] - own_last[:, 4:])[valid]).max() > 1e-3


def test_a_shared_cache_of_one_snapshot_is_plain_sampling_bit_for_bit():
    policy, _, prompt = setup()
    snapshots = _snapshots(policy, 3)
    key, temperature = jax.random.PRNGKey(4), jnp.asarray(1.0)
    shared = jax.jit(policy.sample_shared_cache, static_argnames="length")(
        snapshots, jnp.full(6, 1), prompt, key, length=6, temperature=temperature)
    plain = policy.sample(jax.tree.map(lambda stack: stack[1], snapshots), prompt, key, length=6,
                          temperature=temperature)
    jax.tree.map(np.testing.assert_array_equal, shared, plain)
