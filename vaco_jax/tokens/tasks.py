"""Verifiable token tasks: batched, deterministic from a key, with exact verifiers.

One shared vocabulary (`VOCAB`, ids are positions in it):

    0..9   the digits
    +  *   operators
    =      ends an arithmetic prompt; `>` ends a sorting prompt
    PAD    fills responses after EOS (and nothing else)
    BOS    starts every prompt
    EOS    ends every answer

Every instance has a fixed-length prompt and a unique correct answer of fixed length
(`answer_length`, EOS included): digits, the last `result_length` of them the final result and
any before it worked steps, then EOS. Each task is one `Task` subclass (`TASKS` by name):

- `add`: `BOS a + b =` with `size`-digit operands (leading zeros kept); the answer is the
  `size + 1`-digit sum, most significant digit first (leading zeros kept), then EOS.
- `add_steps` (a worked solution): the prompt of `add`; the answer writes each column's sum
  `a_i + b_i + carry` as two digits (the carry out, then the sum digit), from the least
  significant column, then the `size + 1`-digit sum as `add`'s, then EOS: `3 size + 2` tokens.
- `sort`: `BOS d_1 ... d_n >`; the answer is the `n` digits in ascending order, then EOS.
- `chain` (multi-step): `BOS x_0 op_1 v_1 ... op_k v_k =` with `op_i` in `{+, *}`; the answer is
  every intermediate value `x_i = (x_{i-1} op_i v_i) mod 10`, `x_1 ... x_k`, then EOS; its
  final result is `x_k`.

Held-out split: an instance is an evaluation instance iff the sum of its operand digits is
divisible by `HOLDOUT_MODULUS`. Training prompts never satisfy this and evaluation prompts always
do, so the two sets are disjoint (for `sort`, even as multisets of digits). Both are drawn from
the same key stream; the split is fixed by the last operand digit, which `_into_split` adjusts.

Rewards (`reward`): 1 for an exact answer and 0 otherwise by default; with `reward_on="result"`
only the final result is compared, the worked steps before it need only be digits;
`partial_credit` gives the fraction of the compared positions that are right instead;
`format_penalty` is subtracted when the response is malformed (not exactly
`answer_length - 1` digits followed by EOS).
"""

from __future__ import annotations

import abc
import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp

VOCAB = ("0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "+", "*", "=", ">",
         "PAD", "BOS", "EOS")
PLUS, TIMES, EQUALS, SORT_END, PAD, BOS, EOS = range(10, 17)
VOCAB_SIZE = len(VOCAB)
HOLDOUT_MODULUS = 7
# What the verifier compares: every answer position (the worked solution), or only the final
# result (the steps before it must be digits, whatever their values).
REWARD_ON = ("solution", "result")


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


def _column(value: int, batch: int) -> jax.Array:
    return jnp.full((batch, 1), value, jnp.int32)


def _column_sums(a: jax.Array, b: jax.Array) -> jax.Array:
    """`[B, n]` sums `a_i + b_i + carry` of each column of the operands `[B, n]` (most
    significant digit first), least significant column first. Digit by digit, so that no
    operand width overflows an integer."""

    def add_column(carry, column):
        total = column[0] + column[1] + carry
        return total // 10, total

    _, totals = jax.lax.scan(add_column, jnp.zeros(a.shape[0], a.dtype),
                             (a[:, ::-1].T, b[:, ::-1].T))
    return totals.T


def _sum_digits(column_sums: jax.Array) -> jax.Array:
    """The `n + 1` digits of `a + b`, most significant first, from its column sums `[B, n]`."""
    return jnp.concatenate([column_sums[:, -1:] // 10, column_sums[:, ::-1] % 10], axis=1)


@dataclasses.dataclass(frozen=True)
class Task(abc.ABC):
    """A task's static shape, `size` its one parameter, and how its instances are drawn."""

    size: int
    name: ClassVar[str]

    @property
    @abc.abstractmethod
    def prompt_length(self) -> int: ...

    @property
    @abc.abstractmethod
    def answer_length(self) -> int: ...

    @property
    def result_length(self) -> int:
        """The answer's final result, its last digits before EOS; the digits before are worked
        steps. The whole answer unless the task writes steps."""
        return self.answer_length - 1

    @abc.abstractmethod
    def draw(self, key: jax.Array, batch: int,
             held_out: bool) -> tuple[list[jax.Array], jax.Array]:
        """The pieces `[B, *]` of `batch` prompts, to be concatenated, and their answers' digits
        `[B, answer_length - 1]`."""

    def wrong_answer(self, answer: jax.Array) -> jax.Array:
        """A fixed wrong answer for each answer `[B, answer_length]` (the warm start's wrong
        demonstrations): its last digit shifted by +1 mod 10."""
        last = answer.shape[1] - 2
        return answer.at[:, last].set((answer[:, last] + 1) % 10)

    def unchecked_steps(self, reward_on: str) -> int:
        """How many leading answer positions the verifier does not compare under `reward_on`
        (`REWARD_ON`): the worked steps when only the result is rewarded, else none."""
        return self.answer_length - 1 - self.result_length if reward_on == "result" else 0


@dataclasses.dataclass(frozen=True)
class Add(Task):
    """`size` digits per operand; the answer is the sum."""

    name: ClassVar[str] = "add"

    @property
    def prompt_length(self) -> int:
        return 2 * self.size + 3

    @property
    def answer_length(self) -> int:
        return self.size + 2

    def draw(self, key: jax.Array, batch: int,
             held_out: bool) -> tuple[list[jax.Array], jax.Array]:
        n = self.size
        digits = _into_split(jax.random.randint(key, (batch, 2 * n), 0, 10), held_out)
        a, b = digits[:, :n], digits[:, n:]
        prompt = [_column(BOS, batch), a, _column(PLUS, batch), b, _column(EQUALS, batch)]
        return prompt, self.solve(a, b)

    def solve(self, a: jax.Array, b: jax.Array) -> jax.Array:
        """The answers' digits for the operands `[B, n]` (most significant digit first)."""
        return _sum_digits(_column_sums(a, b))


@dataclasses.dataclass(frozen=True)
class AddSteps(Add):
    """`add` written out: each column's two-digit sum (carry, digit), least significant column
    first, then the sum."""

    name: ClassVar[str] = "add_steps"

    @property
    def answer_length(self) -> int:
        return 3 * self.size + 2

    @property
    def result_length(self) -> int:
        return self.size + 1

    def solve(self, a: jax.Array, b: jax.Array) -> jax.Array:
        column_sums = _column_sums(a, b)
        steps = jnp.stack([column_sums // 10, column_sums % 10], axis=2)
        return jnp.concatenate([steps.reshape(a.shape[0], -1), _sum_digits(column_sums)], axis=1)

    def wrong_answer(self, answer: jax.Array) -> jax.Array:
        """A slip in the first column: its sum digit one too high (mod 10), the carry kept, and
        the sum's last digit as the steps then give it, so the wrong solution is consistent."""
        return super().wrong_answer(answer.at[:, 1].set((answer[:, 1] + 1) % 10))


@dataclasses.dataclass(frozen=True)
class Sort(Task):
    """A list of `size` digits; the answer is the list in ascending order."""

    name: ClassVar[str] = "sort"

    @property
    def prompt_length(self) -> int:
        return self.size + 2

    @property
    def answer_length(self) -> int:
        return self.size + 1

    def draw(self, key: jax.Array, batch: int,
             held_out: bool) -> tuple[list[jax.Array], jax.Array]:
        digits = _into_split(jax.random.randint(key, (batch, self.size), 0, 10), held_out)
        return [_column(BOS, batch), digits, _column(SORT_END, batch)], jnp.sort(digits, axis=1)


@dataclasses.dataclass(frozen=True)
class Chain(Task):
    """`size` steps of `+` or `*` mod 10; the answer is every intermediate value, the last one
    its result."""

    name: ClassVar[str] = "chain"

    @property
    def prompt_length(self) -> int:
        return 2 * self.size + 3

    @property
    def answer_length(self) -> int:
        return self.size + 1

    @property
    def result_length(self) -> int:
        return 1

    def draw(self, key: jax.Array, batch: int,
             held_out: bool) -> tuple[list[jax.Array], jax.Array]:
        n = self.size
        digit_key, op_key = jax.random.split(key)
        digits = _into_split(jax.random.randint(digit_key, (batch, n + 1), 0, 10), held_out)
        ops = jax.random.randint(op_key, (batch, n), PLUS, TIMES + 1)

        def step(x, op_value):
            op, value = op_value
            x = jnp.where(op == PLUS, x + value, x * value) % 10
            return x, x

        _, values = jax.lax.scan(step, digits[:, 0], (ops.T, digits[:, 1:].T))
        interleaved = jnp.stack([ops, digits[:, 1:]], axis=2).reshape(batch, 2 * n)
        return [_column(BOS, batch), digits[:, :1], interleaved, _column(EQUALS, batch)], values.T


TASKS: dict[str, type[Task]] = {t.name: t for t in (Add, Sort, Chain, AddSteps)}


def make_task(name: str, size: int) -> Task:
    if name not in TASKS:
        raise ValueError(f"task={name!r} is not supported; expected one of {tuple(TASKS)}")
    if size < 1:
        raise ValueError(f"task_size={size} must be at least 1")
    return TASKS[name](size)


def sample(task: Task, key: jax.Array, batch: int,
           held_out: bool = False) -> tuple[jax.Array, jax.Array]:
    """`batch` instances: prompts `[B, prompt_length]` and answers `[B, answer_length]` (int32),
    from the training split, or from the evaluation split when `held_out`."""
    prompt, answer = task.draw(key, batch, held_out)
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


def reward(answer: jax.Array, response: jax.Array, *, unchecked: int = 0,
           partial_credit: bool = False, format_penalty: float = 0.0) -> jax.Array:
    """Reward `[B]` of responses `[B, L]` (`L >= answer_length`) against the answers.

    The response is read up to the answer's length; anything generated beyond it means the
    EOS came late, so the answer is wrong (and malformed). Its first `unchecked` positions
    (worked steps, `Task.unchecked_steps`) are not compared: an exact response needs digits
    there, whichever, and partial credit counts only the compared positions.
    """
    length = answer.shape[1]
    if response.shape[1] < length:
        raise ValueError(f"responses of length {response.shape[1]} cannot hold answers of "
                         f"length {length}")
    if not 0 <= unchecked < length:
        raise ValueError(f"unchecked={unchecked} must leave some of the answer's {length} "
                         f"positions compared")
    head = response[:, :length]
    beyond = response[:, length:]
    beyond_clean = jnp.all(beyond == PAD, axis=1)
    matches = (head == answer)[:, unchecked:]
    steps_are_digits = jnp.all(head[:, :unchecked] <= 9, axis=1)
    exact = jnp.all(matches, axis=1) & steps_are_digits & beyond_clean
    score = (jnp.where(beyond_clean, matches.mean(axis=1), 0.0) if partial_credit
             else exact.astype(jnp.float32))
    well_formed = (jnp.all(head[:, :-1] <= 9, axis=1) & (head[:, -1] == EOS) & beyond_clean)
    return score - format_penalty * (~well_formed).astype(jnp.float32)


def decode(tokens) -> str:
    """Human-readable text of a token sequence (for logs and documentation)."""
    return " ".join(VOCAB[int(t)] for t in tokens)
