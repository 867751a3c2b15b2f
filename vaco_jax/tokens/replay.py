"""TBA's replay buffer (`bbartoldson/TBA`, `buffer_utils.py`), as the token testbed keeps it.

The authors' trainer stores, for every prompt its searchers visited, the distinct responses
generated for it (token ids compared exactly, the newer copy kept), and builds each update's
batch of prompt groups from that store: with probability `online_prob` (0.95 on GSM8K) a group
is a prompt of the latest synchronisation with its responses drawn from its newest ones,
otherwise a prompt drawn from every prompt seen so far with responses drawn from all it stores.
Stored responses are used again and again, with the log-probabilities of the policy that
generated them; the trainer recomputes only the learner's.

Here one update's generation is the latest synchronisation: its `P` prompt groups are written
into a ring of `capacity` prompt groups (every group of the run by default, as the authors keep
every prompt they have seen), each with its `G` responses, their behaviour log-probs and
versions, their rewards, and which of them are distinct. A group of the update's batch is then,
with `online_prob`, the update's own group `j` with `G` responses drawn from its distinct ones,
or otherwise a stored group drawn uniformly with `G` responses drawn from its distinct ones;
`G` are drawn without replacement where the group holds `G` distinct, with replacement from the
distinct ones otherwise, as `CommentBuffer.get_batch` draws. `docs/methods/tokens/tba.md` states
what differs from the authors' store.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from vaco_jax.core.knobs import Knob

REPLAY_ONLINE_PROB = Knob("replay_online_prob", 0.95, "replay (`replay = true`): the probability "
                          "that a prompt group of the batch is one of the update's own "
                          "generation rather than a stored one (TBA's GSM8K online_prob)",
                          "[0, 1]")


@struct.dataclass
class ReplayStore:
    """The last `capacity` prompt groups generated, `[capacity, G, ...]`, written as a ring:
    `written` counts the groups written so far, so slots `0 .. min(written, capacity) - 1`
    hold groups."""

    prompt: jax.Array  # [S, prompt_length] int32
    response: jax.Array  # [S, G, L] int32
    mask: jax.Array  # [S, G, L]
    log_prob: jax.Array  # [S, G, L] under the policy that generated each token
    entropy: jax.Array  # [S, G, L]
    version: jax.Array  # [S, G, L] int32, the version that generated each token
    reward: jax.Array  # [S, G]
    distinct: jax.Array  # [S, G] bool, a response no earlier one of its group repeats
    written: jax.Array  # int32


@struct.dataclass
class Generated:
    """One update's generation, `[P, G, ...]` (prompts `[P, prompt_length]`)."""

    prompt: jax.Array
    response: jax.Array
    mask: jax.Array
    log_prob: jax.Array
    entropy: jax.Array
    version: jax.Array
    reward: jax.Array


def empty_store(capacity: int, prompt_length: int, group_size: int,
                response_length: int) -> ReplayStore:
    tokens = (capacity, group_size, response_length)
    return ReplayStore(prompt=jnp.zeros((capacity, prompt_length), jnp.int32),
                       response=jnp.zeros(tokens, jnp.int32), mask=jnp.zeros(tokens),
                       log_prob=jnp.zeros(tokens), entropy=jnp.zeros(tokens),
                       version=jnp.zeros(tokens, jnp.int32),
                       reward=jnp.zeros(tokens[:2]), distinct=jnp.zeros(tokens[:2], bool),
                       written=jnp.zeros((), jnp.int32))


def distinct_responses(response: jax.Array) -> jax.Array:
    """`[G]` True for each response `[G, L]` whose token ids no earlier response of the group
    repeats (responses are PAD after their EOS, so equal ids are equal answers): the first
    copy stands for its duplicates, as TBA's store keeps one item per token sequence."""
    same = jnp.all(response[:, None, :] == response[None, :, :], axis=-1)
    earlier = jnp.tril(same, k=-1)
    return ~jnp.any(earlier, axis=1)


def written_into(store: ReplayStore, generated: Generated) -> tuple[ReplayStore, jax.Array]:
    """The store with the update's `P` groups written over its oldest, and their slots `[P]`."""
    capacity = store.reward.shape[0]
    groups = generated.reward.shape[0]
    slots = (store.written + jnp.arange(groups)) % capacity
    distinct = jax.vmap(distinct_responses)(generated.response)
    stored = store.replace(
        prompt=store.prompt.at[slots].set(generated.prompt),
        response=store.response.at[slots].set(generated.response),
        mask=store.mask.at[slots].set(generated.mask),
        log_prob=store.log_prob.at[slots].set(generated.log_prob),
        entropy=store.entropy.at[slots].set(generated.entropy),
        version=store.version.at[slots].set(generated.version),
        reward=store.reward.at[slots].set(generated.reward),
        distinct=store.distinct.at[slots].set(distinct),
        written=store.written + groups)
    return stored, slots


def draw_members(key: jax.Array, distinct: jax.Array) -> jax.Array:
    """`G` member indices of a group whose distinct responses are `distinct` `[G]`: a
    permutation where all `G` are distinct, else `G` drawn uniformly with replacement from
    the distinct ones (`CommentBuffer.get_batch`)."""
    size = distinct.shape[0]
    count = distinct.sum()
    repeated = jax.random.choice(key, size, (size,), replace=True, p=distinct / count)
    return jnp.where(count == size, jax.random.permutation(key, size), repeated)


def replayed_groups(store: ReplayStore, own_slots: jax.Array, key: jax.Array,
                    online_prob: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The batch's groups from `store` (the update's own already written at `own_slots`):
    each group's slot `[P]`, its members `[P, G]`, and whether it is the update's own `[P]`."""
    online_key, slot_key, member_key = jax.random.split(key, 3)
    groups = own_slots.shape[0]
    capacity = store.reward.shape[0]
    online = jax.random.uniform(online_key, (groups,)) < online_prob
    stored = jnp.minimum(store.written, capacity)
    slots = jnp.where(online, own_slots, jax.random.randint(slot_key, (groups,), 0, stored))
    members = jax.vmap(draw_members)(jax.random.split(member_key, groups),
                                     store.distinct[slots])
    return slots, members, online


def gathered(store: ReplayStore, slots: jax.Array, members: jax.Array) -> Generated:
    """The responses `members` `[P, G]` of the groups at `slots` `[P]`, `[P, G, ...]`."""
    def pick(field: jax.Array) -> jax.Array:
        return field[slots[:, None], members]
    return Generated(prompt=store.prompt[slots], response=pick(store.response),
                     mask=pick(store.mask), log_prob=pick(store.log_prob),
                     entropy=pick(store.entropy), version=pick(store.version),
                     reward=pick(store.reward))
