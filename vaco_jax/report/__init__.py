"""The report layer: turns a sweep's runs table into summary statistics, figures and a Markdown
report, for either testbed (a ``Score`` says what the evaluations measure).

``runs_table`` holds the table's schema and checks, ``scoring`` normalises evaluations into
scores, ``cells`` pairs runs into (variant, lag) cells and bootstraps their summaries,
``kept_gain`` measures the share of its synchronous gain each method keeps under lag,
``cell_rule`` judges an experiment's ``[cell_rule]`` on its runs,
``metrics`` summarises training metrics, ``figures``, ``figures_heatmap``, ``figures_kept_tv``
and ``figures_runs`` draw, ``summary`` holds the summary as typed objects and writes and reads ``summary.json``,
``markdown`` (with ``markdown_diagnostics``, ``markdown_text``, ``markdown_tuning`` and
``markdown_cell_rule``) writes ``report.md`` from it,
``collapse`` asks whether the ESS falls before the score collapses, ``stats`` holds the
aggregates and bootstraps, and ``write`` runs it all: ``write_report``. ``run_figures`` draws the
figures of a single run's folder instead (``vaco-jax report RUN_DIR``). ``compat`` reads runs
tables and summaries as earlier versions wrote them.
"""

from vaco_jax.report.runs_table import (
    CONFIG_PREFIX,
    HP_PREFIX,
    PER_RUN_COLUMNS,
    RUN_COORDINATES,
    RUNS_FILE,
    Score,
    required_columns,
    variant_names,
)

def __getattr__(name: str):
    # `write_report` draws with matplotlib, which takes about a second to import: a command that
    # writes no report (`vaco-jax envs`, a training run, each child process of a sweep) skips it.
    if name == "write_report":
        from vaco_jax.report.write import write_report
        return write_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "CONFIG_PREFIX",
    "HP_PREFIX",
    "PER_RUN_COLUMNS",
    "RUN_COORDINATES",
    "RUNS_FILE",
    "Score",
    "required_columns",
    "variant_names",
    "write_report",
]
