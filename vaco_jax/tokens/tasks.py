"""Verifiable token tasks: batched, deterministic from a key, with exact verifiers.

One shared vocabulary (`VOCAB`, ids are positions in it):

    0..9   the digits
    +  *   operators
    =      ends an arithmetic prompt; `>` ends a sorting prompt
    PAD    fills responses after EOS (and nothing else)
    BOS    starts every prompt
    EOS    ends every answer

Every instance has a fixed-length prompt and a unique correct answer of fixed length
(`answer_length`, EOS included), so the verifier is an exact comparison with that answer:

- `add`: `BOS a + b =` with `digits`-digit operands (leading zeros kept); the answer is the
  `digits + 1`-digit sum, most significant digit first (leading zeros kept), then EOS.
- `sort`: `BOS d_1 ... d_n >`; the answer is the `n` digits in ascending order, then EOS.
- `chain` (multi-step): `BOS x_0 op_1 v_1 ... op_k v_k =` with `op_i` in `{+, *}`; the answer is
  every intermediate value `x_i = (x_{i-1} op_i v_i) mod 10`, `x_1 ... x_k`, then EOS.

Held-out split: an instance is an evaluation instance iff the sum of its operand digits is
divisible by `HOLDOUT_MODULUS`. Training prompts never satisfy this and evaluation prompts always
do, so the two sets are disjoint (for `sort`, even as multisets of digits). Both are drawn from
the same key stream; the split is fixed by the last operand digit, which `_into_split` adjusts.

Rewards (`reward`): 1 for an exact answer and 0 otherwise by default; `partial_credit` gives the
fraction of answer positions that are right instead; `format_penalty` is subtracted when the
response is malformed (not exactly `answer_length - 1` digits followed by EOS).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

VOCAB = ("0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "+", "*", "=", ">",
         "PAD", "BOS", "EOS")
PLUS, TIMES, EQUALS, SORT_END, PAD, BOS, EOS = range(10, 17)
VOCAB_SIZE = len(VOCAB)
HOLDOUT_MODULUS = 7
TASKS = ("add", "sort", "chain")


@dataclasses.dataclass(frozen=True)
class Task:
    """A task's static shape: `name` from `TASKS`; `size` is the number of digits of each
    operand (`add`), of the list (`sort`) or of steps (`chain`)."""

    name: str
    size: int

    @property
    def prompt_length(self) -> int:
        return {"add": 2 * self.size + 3, "sort": self.size + 2,
                "chain": 2 * self.size + 3}[self.name]

    @property
    def answer_length(self) -> int:
        return {"add": self.size + 2, "sort": self.size + 1, "chain": self.size + 1}[self.name]


def make_task(name: str, size: int) -> Task:
    if name not in TASKS:
        raise ValueError(f"task={name!r} is not supported; expected one of {TASKS}")
    if size < 1:
        raise ValueError(f"task_size={size} must be at least 1")
    return Task(name, size)


def _into_split(digits: jax.Array, held_out: bool) -> jax.Array:
    """Moves each row of operand digits `[B, n]` into the split by changing its last digit."""
    rest = digits[:, :-1].sum(axis=1)
    last = digits[:, -1]
    if held_out:
        last = (-rest) % HOLDOUT_MODULUS  # makes the sum divisible
    else:
        # +1 changes the sum by 1 and 9 -> 0 by -9; neither is a multiple of the modulus.
        divisible = (rest + last) % HOLDOUT_MODULUS == 0
        last = jnp.where(divisible, (last + 1) % 10, last)
    return digits.at[:, -1].set(last)


def _to_digits(values: jax.Array, width: int) -> jax.Array:
    powers = 10 ** jnp.arange(width - 1, -1, -1)
    return (values[:, None] // powers) % 10


def _from_digits(digits: jax.Array) -> jax.Array:
    width = digits.shape[-1]
    return (digits * 10 ** jnp.arange(width - 1, -1, -1)).sum(axis=-1)


def _column(value: int, batch: int) -> jax.Array:
    return jnp.full((batch, 1), value, jnp.int32)


def sample(task: Task, key: jax.Array, batch: int,
           held_out: bool = False) -> tuple[jax.Array, jax.Array]:
    """`batch` instances: prompts `[B, prompt_length]` and answers `[B, answer_length]` (int32),
    from the training split, or from the evaluation split when `held_out`."""
    n = task.size
    if task.name == "add":
        digits = _into_split(jax.random.randint(key, (batch, 2 * n), 0, 10), held_out)
        a, b = digits[:, :n], digits[:, n:]
        prompt = [_column(BOS, batch), a, _column(PLUS, batch), b, _column(EQUALS, batch)]
        answer = _to_digits(_from_digits(a) + _from_digits(b), n + 1)
    elif task.name == "sort":
        digits = _into_split(jax.random.randint(key, (batch, n), 0, 10), held_out)
        prompt = [_column(BOS, batch), digits, _column(SORT_END, batch)]
        answer = jnp.sort(digits, axis=1)
    else:
        digit_key, op_key = jax.random.split(key)
        digits = _into_split(jax.random.randint(digit_key, (batch, n + 1), 0, 10), held_out)
        ops = jax.random.randint(op_key, (batch, n), PLUS, TIMES + 1)

        def step(x, op_value):
            op, value = op_value
            x = jnp.where(op == PLUS, x + value, x * value) % 10
            return x, x

        _, answer = jax.lax.scan(step, digits[:, 0], (ops.T, digits[:, 1:].T))
        answer = answer.T
        interleaved = jnp.stack([ops, digits[:, 1:]], axis=2).reshape(batch, 2 * n)
        prompt = [_column(BOS, batch), digits[:, :1], interleaved, _column(EQUALS, batch)]
    answer = jnp.concatenate([answer, _column(EOS, batch)], axis=1)
    return jnp.concatenate(prompt, axis=1).astype(jnp.int32), answer.astype(jnp.int32)


def is_held_out(task: Task, prompt: jax.Array) -> jax.Array:
    """Whether each prompt `[B, prompt_length]` belongs to the evaluation split."""
    operands = (prompt >= 0) & (prompt <= 9)
    return jnp.where(operands, prompt, 0).sum(axis=1) % HOLDOUT_MODULUS == 0


def pad_after_eos(response: jax.Array) -> jax.Array:
    """`response` `[B, L]` with every token after the first EOS replaced by PAD."""
    eos_seen_before = jnp.cumsum(response == EOS, axis=1) - (response == EOS) > 0
    return jnp.where(eos_seen_before, PAD, response)


def response_mask(response: jax.Array) -> jax.Array:
    """1 for the tokens a policy generated (up to and including the first EOS), else 0."""
    eos_seen_before = jnp.cumsum(response == EOS, axis=1) - (response == EOS) > 0
    return (~eos_seen_before).astype(jnp.float32)


def reward(answer: jax.Array, response: jax.Array, *, partial_credit: bool = False,
           format_penalty: float = 0.0) -> jax.Array:
    """Reward `[B]` of responses `[B, L]` (`L >= answer_length`) against the answers.

    The response is read up to the answer's length; anything generated beyond it means the
    EOS came late, so the answer is wrong (and malformed).
    """
    length = answer.shape[1]
    if response.shape[1] < length:
        raise ValueError(f"responses of length {response.shape[1]} cannot hold answers of "
                         f"length {length}")
    head = response[:, :length]
    beyond = response[:, length:]
    beyond_clean = jnp.all(beyond == PAD, axis=1)
    matches = head == answer
    exact = jnp.all(matches, axis=1) & beyond_clean
    score = (jnp.where(beyond_clean, matches.mean(axis=1), 0.0) if partial_credit
             else exact.astype(jnp.float32))
    well_formed = (jnp.all(head[:, :-1] <= 9, axis=1) & (head[:, -1] == EOS) & beyond_clean)
    return score - format_penalty * (~well_formed).astype(jnp.float32)


def decode(tokens) -> str:
    """Human-readable text of a token sequence (for logs and documentation)."""
    return " ".join(VOCAB[int(t)] for t in tokens)
