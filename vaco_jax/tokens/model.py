"""A small decoder-only transformer policy: teacher-forced log-probs and cached sampling.

Both paths run the same `Transformer.__call__` on a key-value cache: teacher forcing writes the
whole sequence at position 0 of an empty cache, sampling writes the prompt and then one token
per `lax.scan` step. The policy is `softmax(logits / temperature)`, so the log-prob recorded
while sampling is the teacher-forced log-prob of the same tokens up to float rounding; the
same holds token by token when each token is drawn from its own snapshot of the parameters
with that snapshot's own cache. Over a cache shared by several snapshots (an inference engine
that keeps its cache across weight updates), the recorded log-prob is the engine's own, which
teacher forcing under any one snapshot does not reproduce.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from vaco_jax.tokens.tasks import VOCAB_SIZE, pad_after_eos, response_mask


Params = dict[str, Any]
"""A policy's flax variables, `{"params": {...}}`: a nested tree of arrays."""


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    layers: int = 2
    width: int = 64
    heads: int = 4
    context: int = 32


class Block(nn.Module):
    width: int
    heads: int

    @nn.compact
    def __call__(self, x, positions, keys, values):
        """`x` `[B, T, W]` at `positions` `[T]`; `keys`/`values` `[B, C, H, D]` the layer's cache.
        Returns the block output and the cache with this chunk written in."""
        head_dim = self.width // self.heads
        q, k, v = jnp.split(nn.Dense(3 * self.width, name="qkv")(nn.LayerNorm()(x)), 3, axis=-1)
        split = lambda t: t.reshape(t.shape[:2] + (self.heads, head_dim))
        start = positions[0]
        keys = jax.lax.dynamic_update_slice(keys, split(k).astype(keys.dtype), (0, start, 0, 0))
        values = jax.lax.dynamic_update_slice(values, split(v).astype(values.dtype),
                                              (0, start, 0, 0))
        scores = jnp.einsum("bthd,bchd->bhtc", split(q), keys) / jnp.sqrt(head_dim)
        causal = jnp.arange(keys.shape[1])[None, :] <= positions[:, None]  # [T, C]
        scores = jnp.where(causal, scores, jnp.finfo(scores.dtype).min)
        attended = jnp.einsum("bhtc,bchd->bthd", jax.nn.softmax(scores, axis=-1), values)
        x = x + nn.Dense(self.width, name="out")(attended.reshape(x.shape))
        hidden = nn.gelu(nn.Dense(4 * self.width, name="up")(nn.LayerNorm()(x)))
        return x + nn.Dense(self.width, name="down")(hidden), keys, values


class Transformer(nn.Module):
    spec: ModelSpec

    @nn.compact
    def __call__(self, tokens, positions, cache):
        """Logits `[B, T, V]` of the next token after each of `tokens` `[B, T]` at `positions`
        `[T]` (consecutive), and the cache `(keys, values)` `[L, B, C, H, D]` updated."""
        spec = self.spec
        x = nn.Embed(VOCAB_SIZE, spec.width, name="embed")(tokens)
        x = x + nn.Embed(spec.context, spec.width, name="position")(positions)[None]
        keys, values = cache
        new_keys, new_values = [], []
        for layer in range(spec.layers):
            x, k, v = Block(spec.width, spec.heads, name=f"block_{layer}")(
                x, positions, keys[layer], values[layer])
            new_keys.append(k)
            new_values.append(v)
        logits = nn.Dense(VOCAB_SIZE, name="head")(nn.LayerNorm()(x))
        return logits.astype(jnp.float32), (jnp.stack(new_keys), jnp.stack(new_values))


@struct.dataclass
class Samples:
    """Responses `[B, L]` with PAD after the first EOS, the mask of generated tokens, and the
    behaviour log-prob and entropy of each token (0 where masked)."""

    response: jax.Array
    mask: jax.Array
    log_prob: jax.Array
    entropy: jax.Array


class TokenPolicy:
    """Functions of a `Transformer`'s parameters for prompts of a fixed length."""

    def __init__(self, spec: ModelSpec):
        if spec.width % spec.heads:
            raise ValueError(f"width={spec.width} must be divisible by heads={spec.heads}")
        self.spec = spec
        self.module = Transformer(spec)

    def empty_cache(self, batch: int, dtype=jnp.float32):
        s = self.spec
        shape = (s.layers, batch, s.context, s.heads, s.width // s.heads)
        return jnp.zeros(shape, dtype), jnp.zeros(shape, dtype)

    def init(self, key: jax.Array) -> Params:
        tokens = jnp.zeros((1, 1), jnp.int32)
        return self.module.init(key, tokens, jnp.zeros(1, jnp.int32), self.empty_cache(1))

    def logits(self, params, tokens: jax.Array) -> jax.Array:
        positions = jnp.arange(tokens.shape[1])
        cache = self.empty_cache(tokens.shape[0], _dtype_of(params))
        return self.module.apply(params, tokens, positions, cache)[0]

    def response_log_probs(self, params, prompt: jax.Array, response: jax.Array,
                           temperature: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Teacher-forced per-token log-probs and entropies `[B, L]` of `response` given
        `prompt`, both 0 at masked positions (after the first EOS)."""
        tokens = jnp.concatenate([prompt, response], axis=1)
        logits = self.logits(params, tokens[:, :-1])[:, prompt.shape[1] - 1:]
        log_probs, entropy = _token_terms(logits, response, temperature)
        mask = response_mask(response)
        return log_probs * mask, entropy * mask

    def sample(self, params, prompt: jax.Array, key: jax.Array, length: int,
               temperature: jax.Array, greedy: bool = False) -> Samples:
        """Generates `length` tokens after `prompt` `[B, P]` with a key-value cache."""
        cache = self.empty_cache(prompt.shape[0], _dtype_of(params))
        return _decode(lambda tokens, positions, cache, t: self.module.apply(
            params, tokens, positions, cache), cache, _own, prompt, key, length, temperature,
            greedy)

    def sample_shared_cache(self, snapshots, slots: jax.Array, prompt: jax.Array,
                            key: jax.Array, length: int, temperature: jax.Array) -> Samples:
        """Like `sample`, but token `t` of every row is drawn by snapshot `slots[t]` of
        `snapshots` (parameters with leaves `[K, ...]`) over one cache that keeps each
        position's keys and values as the snapshot that decoded it wrote them: an inference
        engine that keeps its cache when new weights arrive mid-generation (PipelineRL). The
        log-prob recorded is that engine's, the probability the token was drawn with. Costs one
        policy's decoding and a copy of one snapshot per token.
        """
        chex.assert_shape(slots, (length,))
        cache = self.empty_cache(prompt.shape[0], _dtype_of(snapshots))
        last = length - 1

        def apply(tokens, positions, cache, t):
            params = jax.tree.map(lambda stack: stack[slots[jnp.minimum(t, last)]], snapshots)
            return self.module.apply(params, tokens, positions, cache)

        return _decode(apply, cache, _own, prompt, key, length, temperature)

    def sample_per_token(self, snapshots, slots: jax.Array, prompt: jax.Array, key: jax.Array,
                         length: int, temperature: jax.Array) -> Samples:
        """Like `sample`, but token `t` of row `b` is drawn from snapshot `slots[b, t]` of
        `snapshots` (parameters with leaves `[K, ...]`), as when weights change mid-generation.

        Every snapshot decodes every row with its own cache, so each token is drawn from its
        snapshot's distribution given the whole prefix and records that snapshot's
        teacher-forced log-prob: a learner's per-token ratio then has an exact behaviour term.
        (PipelineRL's inference engines keep the cache the older weights wrote; that second-order
        difference is not modelled.) Costs `K` times the decoding of one policy.
        """
        snapshot_count = jax.tree.leaves(snapshots)[0].shape[0]
        chex.assert_shape(slots, (prompt.shape[0], length))
        cache = jax.tree.map(lambda c: jnp.broadcast_to(c, (snapshot_count,) + c.shape),
                             self.empty_cache(prompt.shape[0], _dtype_of(snapshots)))
        apply_each = jax.vmap(self.module.apply, in_axes=(0, None, None, 0))

        def pick(logits, t):  # [K, B, V] -> each row's own snapshot, [B, V]
            return jnp.take_along_axis(logits, slots[None, :, t, None], axis=0)[0]

        return _decode(lambda tokens, positions, cache, t: apply_each(
            snapshots, tokens, positions, cache), cache, pick, prompt, key, length, temperature)


def _own(logits, t):
    """`pick` of a decoding whose model gives each row its logits directly."""
    return logits


def _decode(apply, cache, pick, prompt: jax.Array, key: jax.Array, length: int,
            temperature: jax.Array, greedy: bool = False) -> Samples:
    """The sampling loop. `apply(tokens, positions, cache, t) -> (logits, cache)` runs the
    model(s) whose last logits draw token `t`, logits `[..., B, T, V]`; `pick(last, t)` turns
    the last position's logits `[..., B, V]` into the `[B, V]` logits that draw token `t`."""
    prompt_length = prompt.shape[1]
    logits, cache = apply(prompt, jnp.arange(prompt_length), cache, 0)

    def step(carry, xs):
        logits, cache, position = carry
        step_key, t = xs
        logits = pick(logits, t)
        scaled = logits / temperature
        token = (jnp.argmax(logits, axis=-1) if greedy
                 else jax.random.categorical(step_key, scaled, axis=-1)).astype(jnp.int32)
        log_prob, entropy = _token_terms(logits[:, None], token[:, None], temperature)
        next_logits, cache = apply(token[:, None], position[None], cache, t + 1)
        return (next_logits[..., 0, :], cache, position + 1), (token, log_prob[:, 0],
                                                              entropy[:, 0])

    carry = (logits[..., -1, :], cache, jnp.asarray(prompt_length, jnp.int32))
    _, (tokens, log_probs, entropies) = jax.lax.scan(
        step, carry, (jax.random.split(key, length), jnp.arange(length)))
    response = pad_after_eos(tokens.T)
    mask = response_mask(response)
    return Samples(response=response, mask=mask, log_prob=log_probs.T * mask,
                   entropy=entropies.T * mask)


def _token_terms(logits, tokens, temperature):
    log_softmax = jax.nn.log_softmax(logits.astype(jnp.float32) / temperature, axis=-1)
    log_probs = jnp.take_along_axis(log_softmax, tokens[..., None], axis=-1)[..., 0]
    entropy = -jnp.sum(jnp.exp(log_softmax) * log_softmax, axis=-1)
    return log_probs, entropy


def _dtype_of(params):
    return jax.tree.leaves(params)[0].dtype


def to_bfloat16(params):
    """`params` in bfloat16: the model then computes in bfloat16, like an inference engine."""
    return jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)

