"""Tests of whether a report says each stabiliser acted, on small hand-built runs tables whose
fractions and acted shares are known."""

import itertools
import json

import numpy as np
import pandas as pd
import pytest

from vaco_jax.core.phase import ACTED_METRICS, MECHANISM_FRACTIONS, acted_name
from vaco_jax.report import Score, compat, metrics
from vaco_jax.report import write as write_module
from vaco_jax.report.metrics import MECHANISM_WORDS

from test_report import write_report

NAN = np.nan
SEEDS = (0, 1, 2, 3)
STEPS = np.array([0, 64, 128])
# Per (algo, seed): per evaluation row, (fraction, acted share) of the clip and the TV filter;
# NaN where the algorithm has no such stabiliser.
NEVER = [(0.0, 0.0)] * 3
ACTS = [(0.02, 0.5), (0.04, 0.75), (0.06, 1.0)]
CLIP = {
    # grpo's clip acts in seeds 0 and 1 only; vaco has a clip that never acts.
    ("grpo", 0): ACTS, ("grpo", 1): ACTS, ("grpo", 2): NEVER, ("grpo", 3): NEVER,
    **{("vaco", seed): NEVER for seed in SEEDS},
}
FILTER = {**{("grpo", s): [(NAN, NAN)] * 3 for s in SEEDS}, **{("vaco", s): ACTS for s in SEEDS}}
SCORE = Score("eval_accuracy", "accuracy", "responses")


def run_rows(algo, seed, clip=CLIP, filtered=FILTER):
    coordinates = {
        "task": "add", "algo": algo, "lag_model": "fixed", "lag": 4.0, "epochs": 1,
        "minibatches": 1, "seed": seed, "run_id": f"{algo}/{seed}", "diverged": False,
        "diverged_at": -1,
    }
    return [
        {
            **coordinates, "update": i, "env_steps": int(steps),
            "eval_accuracy": 0.1 + 0.2 * i + 0.01 * seed,
            "clip_fraction": clip[algo, seed][i][0], "clip_acted": clip[algo, seed][i][1],
            "filter_fraction": filtered[algo, seed][i][0],
            "filter_acted": filtered[algo, seed][i][1],
        }
        for i, steps in enumerate(STEPS)
    ]


def make_runs(**kwargs):
    rows = [run_rows(a, s, **kwargs) for a, s in itertools.product(("grpo", "vaco"), SEEDS)]
    return pd.DataFrame([row for run in rows for row in run])


def report(runs, out):
    summary = write_report(runs, out, score=SCORE, reference_scores={"add": 1.0},
                           focus_algo="vaco", reps=20)
    return summary, (out / "report.md").read_text()


def entries(summary):
    return {r["variant"]: r for r in summary["mechanisms"]}


@pytest.fixture(scope="module")
def acted_report(tmp_path_factory):
    return report(make_runs(), tmp_path_factory.mktemp("acted"))


def test_every_stabiliser_has_its_words():
    assert set(MECHANISM_WORDS) == set(metrics.MECHANISMS)
    assert [acted_name(f) for f in MECHANISM_FRACTIONS] == list(ACTED_METRICS)


def test_run_means_of_fractions_and_acted_shares():
    means = metrics.run_mechanisms(make_runs())
    assert list(means.columns) == [
        "clip_fraction[mean]", "clip_acted[mean]", "filter_fraction[mean]", "filter_acted[mean]"
    ]
    assert means.loc["grpo/0", "clip_acted[mean]"] == pytest.approx(0.75)
    assert means.loc["grpo/2", "clip_fraction[mean]"] == 0.0
    assert np.isnan(means.loc["grpo/0", "filter_acted[mean]"])


def test_the_reports_run_table_carries_the_run_means(tmp_path, monkeypatch):
    drawn = {}
    builders = write_module._figure_builders

    def record(data):
        drawn["run_table"] = data.run_table.set_index("run_id")
        return builders(data)

    monkeypatch.setattr(write_module, "_figure_builders", record)
    report(make_runs(), tmp_path)
    pd.testing.assert_frame_equal(
        drawn["run_table"][metrics.run_mechanisms(make_runs()).columns],
        metrics.run_mechanisms(make_runs()), check_names=False,
    )


def test_summary_of_a_mechanism_that_never_acted_and_one_that_acted_in_some_runs(acted_report):
    summary, _ = acted_report
    assert json.loads(json.dumps(summary["mechanisms"], allow_nan=False)) == summary["mechanisms"]
    grpo, vaco = entries(summary)["grpo"], entries(summary)["vaco"]
    assert (grpo["variant"], grpo["lag"]) == ("grpo", 4.0)
    # Seeds 0 and 1 clip 0.04 of samples at 0.75 of steps on average, seeds 2 and 3 never.
    assert grpo["clip"] == {
        "fraction": pytest.approx(0.02), "acted": pytest.approx(0.375), "runs_acted": 2,
        "runs": 4, "never_acted": False,
    }
    assert vaco["clip"] == {
        "fraction": 0.0, "acted": 0.0, "runs_acted": 0, "runs": 4, "never_acted": True
    }
    assert vaco["filter"] == {
        "fraction": pytest.approx(0.04), "acted": pytest.approx(0.75), "runs_acted": 4,
        "runs": 4, "never_acted": False,
    }


def test_a_variant_without_the_mechanism_gets_no_entry(acted_report):
    summary, text = acted_report
    assert set(entries(summary)["grpo"]) == {"variant", "lag", "clip"}
    assert "| grpo | 4 | 0.020 / 0.375 (2/4) | - |" in text


def test_report_md_says_which_stabiliser_never_acted(acted_report):
    _, text = acted_report
    assert (
        "### Stabilisers: share of samples touched / share of gradient steps at which it acted"
        in text
    )
    assert "| variant | lag | clip | TV filter |" in text
    assert "| vaco | 4 | 0.000 / 0.000 (0/4) | 0.040 / 0.750 (4/4) |" in text
    assert (
        "`vaco` at lag 4: its clip never acted (in none of 4 runs): these runs test vaco "
        "without it." in text
    )
    assert "`grpo` at lag 4: its clip acted in 2 of 4 runs only." in text
    assert "TV filter never acted" not in text and "Every stabiliser acted" not in text
    assert "n/a" not in text.split("### Stabilisers")[1]


def test_report_md_says_when_every_stabiliser_acted(tmp_path):
    always = {key: ACTS for key in CLIP}
    summary, text = report(make_runs(clip=always), tmp_path)
    assert not [r for r in summary["mechanisms"] for m in metrics.MECHANISMS
                if m in r and r[m]["runs_acted"] < r[m]["runs"]]
    assert "Every stabiliser acted in every run that recorded it." in text
    assert "never acted" not in text


def test_a_table_without_acted_shares_falls_back_to_the_fractions(tmp_path):
    summary, text = report(make_runs().drop(columns=list(ACTED_METRICS), errors="ignore"),
                           tmp_path)
    grpo, vaco = entries(summary)["grpo"], entries(summary)["vaco"]
    assert grpo["clip"] == {
        "fraction": pytest.approx(0.02), "acted": None, "runs_acted": 2, "runs": 4,
        "never_acted": False,
    }
    assert vaco["clip"] == {
        "fraction": 0.0, "acted": None, "runs_acted": 0, "runs": 4, "never_acted": True
    }
    assert set(grpo) == {"variant", "lag", "clip"}
    assert "| vaco | 4 | 0.000 / n/a (0/4) | 0.040 / n/a (4/4) |" in text
    assert "records no share of steps at which the stabiliser acted" in text
    assert (
        "`vaco` at lag 4: its clip never acted (in none of 4 runs: its fraction was 0 in every "
        "evaluation period): these runs test vaco without it." in text
    )


def test_a_table_without_stabilisers_says_so(tmp_path):
    runs = make_runs().drop(columns=["clip_fraction", "clip_acted", "filter_fraction",
                                     "filter_acted"])
    summary, text = report(runs, tmp_path)
    assert summary["mechanisms"] == [
        {"variant": "grpo", "lag": 4.0}, {"variant": "vaco", "lag": 4.0}
    ]
    assert "Not measured: the runs table records no stabiliser's fraction." in text


def test_a_table_holding_0_for_stabilisers_an_algorithm_lacks_reports_them_as_absent(tmp_path):
    """Tables written before trainers recorded NaN hold 0 there: with the testbed's registry the
    report reads those as absent, not as a stabiliser that never acted."""
    zeros = {("grpo", s): NEVER for s in SEEDS}  # grpo has no TV filter, yet records 0
    old = make_runs(filtered={**FILTER, **zeros}).drop(columns=list(ACTED_METRICS),
                                                     errors="ignore")
    has = {"grpo": {"clip_fraction"}, "vaco": {"clip_fraction", "filter_fraction"}}
    summary, text = report(old, tmp_path / "unaware")
    assert entries(summary)["grpo"]["filter"]["never_acted"]
    assert "`grpo` at lag 4: its TV filter never acted" in text
    summary = write_report(old, tmp_path / "aware", score=SCORE, reference_scores={"add": 1.0},
                           focus_algo="vaco", reps=20, mechanisms=has.__getitem__)
    text = (tmp_path / "aware" / "report.md").read_text()
    assert set(entries(summary)["grpo"]) == {"variant", "lag", "clip"}
    assert entries(summary)["vaco"]["filter"]["runs_acted"] == 4
    assert "| grpo | 4 | 0.020 / n/a (2/4) | - |" in text
    assert "grpo` at lag 4: its TV filter" not in text
    # The runs table is written as recorded.
    assert pd.read_parquet(tmp_path / "aware" / "runs.parquet")["filter_fraction"].notna().all()


def test_absent_mechanisms_are_masked_per_algorithm_and_unknown_algorithms_kept():
    table = pd.DataFrame({"algo": ["ppo", "vaco", "mystery"], "clip_fraction": [0.1, 0.0, 0.0],
                          "clip_acted": [1.0, 0.0, 0.0], "filter_fraction": [0.0, 0.2, 0.3]})
    registry = {"ppo": {"clip_fraction"}, "vaco": {"filter_fraction"}}
    masked = compat.without_absent_mechanisms(table, registry.__getitem__)
    np.testing.assert_array_equal(masked["clip_fraction"], [0.1, NAN, 0.0])
    np.testing.assert_array_equal(masked["clip_acted"], [1.0, NAN, 0.0])
    np.testing.assert_array_equal(masked["filter_fraction"], [NAN, 0.2, 0.3])
    assert table["filter_fraction"].tolist() == [0.0, 0.2, 0.3]  # the input is left alone


@pytest.mark.parametrize("testbed, expected", [
    ("control", {"ppo": {"clip_fraction"},
                 "vaco": {"filter_fraction", "is_truncated_fraction", "skipped_step_fraction"},
                 "vaco_filter_only": {"filter_fraction", "skipped_step_fraction"},
                 "impala": {"is_truncated_fraction"},
                 "decoupled_ppo": {"clip_fraction", "is_truncated_fraction"}}),
    ("tokens", {"grpo": {"clip_fraction"}, "tis": {"is_truncated_fraction"},
                "m2po": {"clip_fraction"},
                "m2po_drop": {"is_masked_fraction", "skipped_step_fraction"},
                "gspo": {"clip_fraction", "is_truncated_fraction"}, "topr": {"is_tapered_fraction"},
                "mis": {"is_masked_fraction", "skipped_step_fraction"},
                "freshness": {"clip_fraction", "stale_dropped_fraction"},
                "freshness_mask": {"clip_fraction", "stale_dropped_fraction",
                                   "skipped_step_fraction"},
                "vaco": {"filter_fraction", "is_truncated_fraction", "skipped_step_fraction"}}),
])
def test_each_testbed_reads_its_algorithms_stabilisers_from_their_losses(testbed, expected):
    from vaco_jax import testbeds

    bed = testbeds.named(testbed)
    for algo, fractions in expected.items():
        assert bed.mechanisms(algo) == fractions, algo
    assert all(bed.mechanisms(a) <= set(MECHANISM_FRACTIONS) for a in bed.algorithms())
    with pytest.raises(KeyError):
        bed.mechanisms("no_such_algorithm")
