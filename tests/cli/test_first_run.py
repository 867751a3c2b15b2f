"""A first run talks: `vaco-jax train` says what it runs under which lag, that it compiles and
for how long, counts per seed in named units, puts each score beside its reference, says what
to do next; `vaco-jax report RUN_DIR` draws the run's figures."""

import contextlib
import io
import shutil
from pathlib import Path

import pytest

from vaco_jax import cli, testbeds
from vaco_jax.cli import sweep as sweep_cli
from vaco_jax.control.config import ControlConfig
from vaco_jax.core.lag_models import LAG_MODELS, named
from vaco_jax.report import run_figures
from vaco_jax.report import summary as report_summary
from vaco_jax.infra.manifest import recorded
from vaco_jax.tokens.config import TokenConfig

# 4 updates of 8 environments x 16 steps, evaluated every 2; toy_reach's own episode length
# (1000), at which its reference (the maximum return) holds.
ARGS = ["train", "--env", "toy_reach", "--total-steps", "512", "--num-envs", "8",
        "--rollout-length", "16", "--epochs", "2", "--minibatches", "2", "--buffer-capacity", "4",
        "--eval-every", "2", "--num-eval-envs", "4", "--actor-hidden", "16", "--critic-hidden",
        "16"]


def _main(*args: str) -> tuple[int, str, str]:
    """`vaco-jax ARGS`: its exit status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(args))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def first_run(tmp_path_factory) -> tuple[Path, str, str]:
    """A first `vaco-jax train` with its progress shown: its folder, stdout and stderr."""
    out = tmp_path_factory.mktemp("first") / "run"
    code, stdout, stderr = _main(*ARGS, "--out", str(out))
    assert code == 0, stderr
    return out, stdout, stderr


def test_the_header_says_what_runs_in_which_units_under_which_lag(first_run):
    out, stdout, _ = first_run
    assert stdout.splitlines()[:3] == [
        "ppo on toy_reach: 2 seeds x 512 environment steps (4 updates of 128, evaluated every 2)",
        "lag: fixed 0 (synchronous); policy buffer of 4 versions",
        f"results: {out}"]


def test_compiling_is_said_and_timed_before_the_bar_counts_per_seed(first_run):
    _, _, stderr = first_run
    lines = stderr.replace("\r", "\n").splitlines()
    assert lines[0] == "compiling the training program ..."
    assert lines[1].startswith("compiled in ") and lines[1].endswith(" s")
    bars = [line for line in lines[2:] if "%|" in line]
    assert bars and all("environment steps per seed" in line for line in bars)
    assert "512/512 environment steps per seed" in bars[-1] and "return=" in bars[-1]


def test_the_summary_counts_per_seed_beside_the_reference_then_says_what_next(first_run):
    out, stdout, _ = first_run
    assert "ppo on toy_reach: 4 updates, 512 environment steps per seed\n" in stdout
    assert "  trained in " in stdout and " environment steps/s per seed), after " in stdout
    seeds = [line for line in stdout.splitlines() if line.startswith("  seed ")]
    assert len(seeds) == 2 and all(line.endswith(" (reference 1000)") for line in seeds)
    assert "  reference 1000: maximum (reward at most 1 per step)\n" in stdout
    following = stdout[stdout.index("next:"):].splitlines()
    assert following[1] == f"  plot this run:    vaco-jax report {out}"
    assert f"--lag uniform:3 --out {out}-uniform3" in following[2]
    assert "vaco-jax sweep experiments/quick.toml --out runs/quick" in following[4]
    # What the quick study runs, named as its experiment file names it.
    assert "(ppo, ppo_recompute and vaco on inverted_pendulum, lag 0 and 4;" in following[5]


def test_no_progress_leaves_stderr_silent_and_stdout_unchanged(tmp_path):
    # The first run's program (a lag level is a traced hyper-parameter): cached, not compiled.
    code, stdout, stderr = _main(*ARGS, "--lag", "fixed:1", "--no-progress",
                                 "--out", str(tmp_path / "run"))
    assert code == 0 and stderr == ""
    assert "lag: fixed 1 (all acting 1 version behind the learner)" in stdout
    assert "  trained in " in stdout
    assert (f"  without lag:      the same command with --lag fixed:0 --out "
            f"{tmp_path / 'run'}-synchronous") in stdout


def test_report_draws_a_single_runs_figures_into_its_folder(first_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(first_run[0], run)
    code, stdout, stderr = _main("report", str(run))
    assert code == 0, stderr
    stems = ("fig_learning_curves", "fig_staleness_diagnostics")
    assert stdout.splitlines() == [f"figures of the run in {run}:", *(
        f"  {run / stem}.png: {run_figures.FIGURES[stem]}" for stem in stems)]
    for stem in stems:
        assert (run / f"{stem}.png").read_bytes().startswith(b"\x89PNG")
        assert recorded(run)[f"{stem}.png"] == "file"  # an --overwrite of the run removes them


def test_the_staleness_figure_has_a_panel_per_metric_the_run_measured(first_run):
    run = run_figures.read_run(first_run[0])
    drawn = run_figures.figure_staleness(run, {label: "C0" for label in run.labels.values()})
    titles = [ax.get_title() for ax in drawn[0].axes if ax.get_visible()]
    measured = [m for m in run_figures.STALENESS_PANELS
                if m in run.table and run.table[m].notna().any()]
    assert titles == [run_figures.STALENESS_PANELS[m][0] for m in measured]
    # ppo has a clip and no TV filter: the filter's NaN column gets no panel.
    assert "clip_fraction" in measured and "filter_fraction" not in measured
    assert drawn[1] == ["seed 0", "seed 1"]


def test_report_names_a_run_folders_unreadable_metrics(first_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(first_run[0], run)
    (run / "metrics.parquet").write_bytes(b"not parquet")
    code, _, stderr = _main("report", str(run))
    assert code == 2
    assert f"cannot read {str(run / 'metrics.parquet')!r}" in stderr
    assert f"vaco-jax train --resume {run}` rewrites it" in stderr


LAG_TEXTS = [
    ("fixed", 0, "fixed 0 (synchronous)"),
    ("fixed", 1, "fixed 1 (all acting 1 version behind the learner)"),
    ("fixed", 3, "fixed 3 (all acting 3 versions behind the learner)"),
    ("uniform", 3, "uniform 3 (lags uniform over 0..3 versions, drawn every update)"),
    ("geometric", 0.5, "geometric 0.5 (P(lag j) proportional to 0.5 (1 - 0.5)^j, j up to 15)"),
    ("per_actor", 2, "per_actor 2 (a constant lag per actor, drawn once from 0..2 versions)"),
    ("bounded", 4, "bounded 4 (lags uniform over 0..15 versions, capped at 4)"),
    ("in_flight", 2, "in_flight 2 (weights change while acting: start lags uniform over 0..2 "
                     "versions, catching up to the newest)"),
    ("empirical", 0, "empirical (P(lag = 0, 1, ...) = 0.5, 0.5)"),
]


@pytest.mark.parametrize("model,level,meaning", LAG_TEXTS)
def test_a_lag_is_said_with_its_model_level_and_meaning(model, level, meaning):
    probabilities = (0.5, 0.5) if model == "empirical" else ()
    assert named(model, probabilities).describe(level, capacity=16) == meaning


def test_every_lag_model_has_its_words():
    assert {model for model, _, _ in LAG_TEXTS} == set(LAG_MODELS)


def test_the_reference_is_the_tasks_at_its_own_episode_length():
    reference = testbeds.CONTROL.reference(ControlConfig(env="toy_reach"))
    assert (reference.score, reference.meaning) == (1000.0, "maximum (reward at most 1 per step)")
    assert testbeds.CONTROL.reference(ControlConfig(env="toy_reach", episode_length=40)) is None
    cartpole = ControlConfig(env="CartPole-v1", episode_length=500)
    assert testbeds.named(cartpole.testbed).reference(cartpole).score == 500.0
    assert testbeds.TOKENS.reference(TokenConfig()).score == 1.0



def test_the_next_steps_name_every_algorithm_of_the_quick_study():
    """What a first run's "next:" says the quick study compares is what its file runs."""
    import tomllib

    from vaco_jax.cli import console

    root = Path(__file__).resolve().parents[2]
    for _, path, _, compares in console.NEXT.values():
        experiment = tomllib.loads((root / path).read_text())
        named = compares.split(" on ")[0].replace(" and ", ", ").lower().split(", ")
        assert named == experiment["algos"], path


def test_a_sweep_report_ends_by_pointing_to_the_leaderboard(capsys):
    study = Path(__file__).parents[2] / "experiments" / "results" / "quick"
    sweep_cli._print_scores(report_summary.loads((study / "summary.json").read_text()), "out")
    *_, report_line, board_line = capsys.readouterr().out.strip().splitlines()
    assert report_line.startswith("report: out/report.md")
    assert board_line.startswith("leaderboard: vaco-jax leaderboard --out board")
