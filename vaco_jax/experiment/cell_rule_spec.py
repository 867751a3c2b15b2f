"""The `[cell_rule]` table of an experiment: the rule, committed before any run, by which the
baseline's synchronous runs choose the study's cells (its criteria: `vaco_jax.report.cell_rule`)."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from vaco_jax.experiment import fields
from vaco_jax.report.rule_records import CellRule

BOUNDS = {"min_gain": (0.0, math.inf, False), "min_seed_share": (0.0, 1.0, True),
          "max_final": (0.0, math.inf, False), "rising_window": (0.0, 1.0, False),
          "max_kept_gain": (0.0, 1.0, True)}
"""Each criterion's range: (above, up to, whether the upper end is allowed)."""
KEYS = ("baseline", *BOUNDS)


def parse_cell_rule(table: Any, algos: Sequence[str], tasks: Sequence[str],
                    levels: Collection[float], references: Mapping[str, float]) -> CellRule:
    """The `[cell_rule]` table (its criteria: `vaco_jax.report.cell_rule`), refused where the
    experiment cannot measure it: no synchronous level, no lag level above 0 for the lag
    criterion, or no reference score for a task where a criterion is normalised."""
    if not isinstance(table, dict):
        raise ValueError(f"must be a table ([cell_rule]), got {fields.quoted(table)}")
    fields.check_keys(table, KEYS)
    baseline = table.get("baseline", algos[0])
    if not isinstance(baseline, str):
        raise ValueError(f"baseline must be one algorithm name, got {fields.quoted(baseline)}")
    fields.check_names("baseline", [baseline], algos)
    if "min_seed_share" in table and "min_gain" not in table:
        raise ValueError("min_seed_share is the share of runs that must reach min_gain; set "
                         "min_gain too")
    criteria = {key: fields.bounded_number(key, table[key], *bounds)
                for key, bounds in BOUNDS.items() if key in table}
    if not criteria:
        raise ValueError(f"needs at least one criterion of "
                         f"{[k for k in BOUNDS if k != 'min_seed_share']}")
    if "min_gain" in criteria:
        criteria.setdefault("min_seed_share", 1.0)  # every run, unless a share is given
    if 0 not in levels:
        raise ValueError("the rule judges the baseline's synchronous runs, but no [lag] entry "
                         "has level 0")
    if "max_kept_gain" in criteria and max(levels) <= 0:
        raise ValueError("max_kept_gain needs a [lag] level above 0 to measure the kept gain at")
    rule = CellRule(baseline=baseline, **criteria)
    missing = [t for t in tasks if t not in references]
    if rule.normalised and missing:
        raise ValueError(f"{', '.join(rule.normalised)} are normalised by [reference_scores], "
                         f"which has no score for task(s) {missing}")
    return rule
