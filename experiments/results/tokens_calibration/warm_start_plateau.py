"""The calibrated warm start's held-out accuracy against its target, by steps and seed.

    python experiments/results/tokens_calibration/warm_start_plateau.py add 2 2,64,4,16 \
        1000,2000,4000 0,1,2,3,4

Arguments: task, task size, model (layers,width,heads,context), step counts, seeds. For each it
trains `supervised_train` with the default calibrated settings and prints the greedy accuracy on
128 and 1024 held-out prompts with their targets, and the probability of the exact right answer
under sampling at temperature 0.7 on the corrupted class and outside it.
"""

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from vaco_jax.tokens import evaluation, tasks, warm_start
from vaco_jax.tokens.model import ModelSpec, TokenPolicy

TEMPERATURE = 0.7


def main(task_name: str, size: str, model: str, steps: str, seeds: str) -> None:
    task = tasks.make_task(task_name, int(size))
    spec = ModelSpec(*map(int, model.split(",")))
    policy = TokenPolicy(spec)
    held_out = {n: evaluation.held_out_set(task, n) for n in (128, 1024)}
    for step_count in map(int, steps.split(",")):
        for seed in map(int, seeds.split(",")):
            settings = warm_start.WarmStart(steps=step_count, seed=seed)
            start = time.perf_counter()
            params = jax.block_until_ready(warm_start.supervised_train(task, spec, settings)[0])
            seconds = time.perf_counter() - start
            line = [f"steps={step_count} seed={seed}"]
            for n, (prompts, answers) in held_out.items():
                accuracy = evaluation.greedy_accuracy(policy, params, prompts, answers,
                                                      task.answer_length + 1)
                line.append(f"acc{n}={float(accuracy):.3f} "
                            f"target{n}={warm_start.target_accuracy(settings, prompts):.3f}")
            prompts, answers = held_out[1024]
            log_probs, _ = policy.response_log_probs(params, prompts, answers,
                                                     jnp.asarray(TEMPERATURE))
            right = np.exp(np.asarray(log_probs.sum(axis=1)))
            in_class = np.asarray(warm_start.in_corrupted_class(prompts,
                                                                settings.corrupted_share))
            line.append(f"p_right class={right[in_class].mean():.3f} "
                        f"other={right[~in_class].mean():.3f} time={seconds:.1f}s")
            print(" ".join(line), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
