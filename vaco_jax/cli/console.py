"""What a training command says around its run, on stdout: the header before anything compiles
(what runs, for how long, under which lag, where its results go), the summary after it (each
seed's score beside its reference, how long training took) and what to do next. Progress (the
bar, compiling, a warm start) goes to stderr; `--no-progress` hides the bar and compiling, never
a warm start's messages, which tell what a long wait is.
"""

from __future__ import annotations

import logging
import shlex
import sys

import numpy as np
from tqdm.auto import tqdm

from vaco_jax import testbeds
from vaco_jax.core.lag_models import Fixed
from vaco_jax.core.phase import MECHANISM_FRACTIONS, acted_name
from vaco_jax.report.metrics import MECHANISM_WORDS, mechanism_name
from vaco_jax.run.driver import Driver, TrainingResult

NEXT = {"control": ("train", "experiments/quick.toml", "runs/quick",
                    "ppo, ppo_recompute and vaco on inverted_pendulum, lag 0 and 4"),
        "tokens": ("tokens", "experiments/tokens_quick.toml", "runs/tokens_quick",
                   "GRPO on 2-digit addition, lag 0 and 3")}
"""Testbed -> (its command, its quick study's experiment file, folder and what it compares)."""
SUGGESTED_LAG = 4
"""The uniform lag the next steps suggest (at most the buffer's capacity - 1, which it must be
below)."""


def _lag(runs: Driver | TrainingResult) -> float:
    """The lag of the runs (a command's runs share it)."""
    return float(np.asarray(runs.hparams.lag).ravel()[0])


def header(runs: Driver, out: str, resume: bool) -> str:
    """What runs (seeds, steps per seed in the testbed's units, updates), under which lag, and
    where its results go."""
    testbed, cfg = runs.testbed, runs.config
    steps = cfg.num_updates * cfg.steps_per_update
    seeds = f"{runs.num_runs} seed{'s' if runs.num_runs > 1 else ''}"
    preset = f"{cfg.lag_preset.describe()}: " if cfg.lag_preset else ""
    return "\n".join([
        f"{cfg.algo} on {testbed.task(cfg)}: {seeds} x {steps:,} {testbed.steps_name} "
        f"({cfg.num_updates} updates of {cfg.steps_per_update:,}, evaluated every "
        f"{cfg.updates_per_period})",
        f"lag: {preset}{cfg.lag_model.describe(_lag(runs), cfg.buffer_capacity)}; policy "
        f"buffer of {cfg.buffer_capacity} versions",
        f"results: {out}{' (resumed)' if resume else ''}"])


def summary(result: TrainingResult, out: str) -> str:
    """Steps per seed, the time spent training (compiling apart), each seed's first and last
    score beside the reference, and the result files."""
    testbed, cfg = testbeds.named(result.config.testbed), result.config
    final = result.table().groupby("seed")[testbed.score].agg(
        lambda s: s.dropna().iloc[-1] if s.notna().any() else np.nan)
    initial = result.metrics[testbed.score][:, 0]
    ref = testbed.reference(cfg)
    beside = "" if ref is None else f" (reference {ref.score:g})"
    lines = [f"\n{cfg.algo} on {testbed.task(cfg)}: {result.updates_done} updates, "
             f"{result.updates_done * cfg.steps_per_update:,} {testbed.steps_name} per seed"]
    timing = result.timing
    if timing is not None and timing.updates:
        trained = ("" if timing.updates == result.updates_done
                   else f" its last {timing.updates} updates")
        rate = timing.updates * cfg.steps_per_update / timing.train_seconds
        lines.append(f"  trained{trained} in {timing.train_seconds:.1f} s ({rate:,.0f} "
                     f"{testbed.steps_name}/s per seed), after {timing.compile_seconds:.1f} s "
                     f"of compiling")
    for (seed, value), start, diverged, at in zip(final.items(), initial, result.diverged,
                                                  result.diverged_at):
        note = f"  DIVERGED at update {at}" if diverged else ""
        lines.append(f"  seed {seed}: {testbed.score_name} {start:.3f} -> {value:.3f}{beside}"
                     f"{note}")
    if ref is not None:
        lines.append(f"  reference {ref.score:g}: {ref.meaning}")
    lines += _stabilisers(result.table(), cfg.algo)
    lines.append(f"results: {out}/metrics.csv, {out}/metrics.parquet, {out}/config.json, "
                 f"{out}/status.json, checkpoint in {out}/checkpoint/")
    return "\n".join(lines)


def _stabilisers(table, algo: str) -> list[str]:
    """For each clip, filter, mask or truncation the algorithm has: the share of samples it
    touched and of gradient steps at which it acted, over every seed; a run in which it never
    acted tested the algorithm without it, which the reader must know."""
    lines = []
    for fraction in MECHANISM_FRACTIONS:
        acted = acted_name(fraction)
        if acted not in table or not table[acted].notna().any():
            continue
        words = MECHANISM_WORDS[mechanism_name(fraction)]
        share = float(table[acted].mean())
        if share == 0:
            lines.append(f"  {words}: never acted (these runs are {algo} without it)")
        else:
            lines.append(f"  {words}: touched {float(table[fraction].mean()):.1%} of samples, "
                         f"acted at {share:.0%} of gradient steps")
    return lines


def next_steps(result: TrainingResult, out: str) -> str:
    """What to do after a run: plot it, change its lag, run the quick study."""
    testbed, cfg = testbeds.named(result.config.testbed), result.config
    command, experiment, folder, compares = NEXT[testbed.name]
    if isinstance(cfg.lag_model, Fixed) and _lag(result) == 0:
        level = min(SUGGESTED_LAG, cfg.buffer_capacity - 1)
        lag = (f"add lag:          the same command with --lag uniform:{level} --out "
               f"{shlex.quote(f'{out}-uniform{level}')}\n"
               f"                    (the lag models: vaco-jax {command} --help)")
    else:
        lag = (f"without lag:      the same command with --lag fixed:0 --out "
               f"{shlex.quote(f'{out}-synchronous')}")
    return "\n".join([
        "next:",
        f"  plot this run:    vaco-jax report {shlex.quote(out)}",
        f"  {lag}",
        f"  the quick study:  vaco-jax sweep {experiment} --out {folder}",
        f"                    ({compares}; in the repository's folder)"])


class _ProgressHandler(logging.Handler):
    """Writes vaco_jax's progress messages (a warm start's) to stderr, where the progress bars
    are, redrawing any bar under way below them."""

    def emit(self, record: logging.LogRecord) -> None:
        tqdm.write(self.format(record), file=sys.stderr)


_HANDLER = _ProgressHandler()


def show_progress_messages(shown: bool) -> None:
    """Shows vaco_jax's INFO messages on stderr (`shown`), or only its warnings (a process
    other than 0 of a run over several, which leaves reporting to process 0)."""
    logger = logging.getLogger("vaco_jax")
    if _HANDLER not in logger.handlers:
        logger.addHandler(_HANDLER)
        # Said once: importing Orbax gives the root logger a handler that would say it again.
        logger.propagate = False
    logger.setLevel(logging.INFO if shown else logging.WARNING)
