"""`vaco-jax envs`: the registered control tasks, read from the registry without building any."""

from __future__ import annotations

from vaco_jax.control import envs

HEADER = ("task", "backends", "actions", "episode length", "reference score")


def add_parser(subparsers) -> None:
    subparsers.add_parser(
        "envs", help="list the registered control tasks: backends, actions, episode length "
                     "(the default of --episode-length), reference score and the optional "
                     "extra a task needs")


def _actions(spec: envs.Task) -> str:
    kind = {True: "discrete", False: "continuous", None: "?"}[spec.discrete]
    return kind if spec.action_size is None else f"{kind} {spec.action_size}"


def _reference(spec: envs.Task) -> str:
    if spec.reference_score is None:
        return "-"
    return f"{spec.reference_score:g} {spec.reference}".rstrip()


def _row(spec: envs.Task) -> tuple[str, ...]:
    name = f"{spec.name} [{spec.extra}]" if spec.extra else spec.name
    return (name, ",".join(spec.backends), _actions(spec), str(spec.episode_length),
            _reference(spec))


def rows() -> list[tuple[str, ...]]:
    """One row per registered task, in registration order, under `HEADER`; a task that needs an
    optional extra is marked with its name, e.g. `[playground]`."""
    return [_row(envs.task(name)) for name in envs.names()]


def run_envs(args) -> int:
    table = [HEADER, *rows()]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADER) - 1)]
    for row in table:
        print("  ".join([*(cell.ljust(w) for cell, w in zip(row, widths)), row[-1]]))
    for extra in dict.fromkeys(envs.task(name).extra for name in envs.names()):
        if extra:
            print(f"tasks marked [{extra}] need the {extra} extra: "
                  f"pip install 'vaco-jax[{extra}]'")
    return 0
