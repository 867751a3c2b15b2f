"""The leaderboard built from a tiny synthetic results folder: a study written by the report
layer as a sweep writes it, a damaged one, and a link out of the folder; and a study of a
plugin's algorithm, which the fidelity card does not describe."""

from __future__ import annotations

import dataclasses
import html
import itertools
import json
import math
import os
from pathlib import Path

import pandas as pd
import pytest

from fake_plugins import fake_entry_points, private_registries
from vaco_jax.cli import main
from vaco_jax.control import algorithms as control
from vaco_jax.core.registry import ENTRY_POINT_GROUP
from vaco_jax.leaderboard import board as board_module
from vaco_jax.leaderboard import pages
from vaco_jax.leaderboard.site import build_site, stamp
from vaco_jax.leaderboard.studies import read_studies
from vaco_jax.report import write_report
from vaco_jax.report.summary import Normalisation

from site_checks import CARD, broken_links, check_board_numbers, run_table

SEEDS = range(4)
LAGS = (0.0, 2.0)
STEPS = (0, 50, 100)
CLAIMS = """\
rule = "A study counts where its committed cell rule holds."

[[claim]]
id = 1
claim = "Lag hurts ppo on toy_reach."
source = "a synthetic paper"
studies = ["toy"]
evidence = ["elsewhere"]
status = "reproduced"
numbers = "ppo keeps little."
figure = "fig_kept_gain.png"
scale = "tiny"
as_of = "2026-12-07"
commit = "abc1234"

[[claim]]
id = 2
claim = "Nothing tests this."
source = "another paper"
studies = []
status = "untested"
numbers = "no study"
figure = ""
scale = ""
as_of = "2026-12-07"
commit = "abc1234"
"""


README = """# The toy study

Its verdict: ppo keeps little. <script>alert("board")</script>

![kept gain](fig_kept_gain.png) and [its runs](runs.parquet); [a file outside](../../secret.txt)
and [a script](javascript:alert(1)).
"""


def _runs(algos: tuple[str, ...] = ("ppo", "vaco")) -> pd.DataFrame:
    """ppo loses most of its gain at lag 2, the others little; each seed gains a different
    amount. vaco filters, the others clip."""
    rows = []
    for algo, lag, seed in itertools.product(algos, LAGS, SEEDS):
        gain = (40.0 + 10 * seed) * (1.0 if lag == 0.0 else 0.3 if algo == "ppo" else 0.9)
        mechanism = {"filter_fraction": 0.0, "filter_acted": 0.0} if algo == "vaco" \
            else {"clip_fraction": 0.1 * lag, "clip_acted": 0.5 * lag / 2}
        for update, steps in enumerate(STEPS):
            rows.append({"task": "toy_reach", "algo": algo, "lag_model": "uniform", "lag": lag,
                         "epochs": 2, "minibatches": 2, "seed": seed,
                         "run_id": f"{algo}/lag{lag:g}/s{seed}", "update": update,
                         "env_steps": steps, "eval_return": 10.0 + gain * update / 2,
                         "diverged": False, "diverged_at": -1, **mechanism})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    write_report(_runs(), root / "toy", reference_scores={"toy_reach": 100.0}, reps=50)
    (root / "toy" / "experiment.toml").write_text(
        'name = "toy"\ntasks = ["toy_reach"]\nalgos = ["ppo", "vaco"]\n'
        '[hparams]\nlearning_rate = 1e-3\n')
    (root / "toy" / "README.md").write_text(README)
    broken = root / "broken"
    broken.mkdir()
    for name, text in (("summary.json", "{not json"), ("report.md", "#"), ("runs.parquet", ""),
                       ("experiment.toml", "")):
        (broken / name).write_text(text)
    outside = tmp_path_factory.mktemp("outside")
    write_report(_runs(), outside / "elsewhere", reps=10)
    (root / "linked").symlink_to(outside / "elsewhere", target_is_directory=True)
    claims = root.parent / "claims.toml"
    claims.write_text(CLAIMS)
    return root, claims


@pytest.fixture(scope="module")
def site(results, tmp_path_factory):
    root, claims = results
    out = tmp_path_factory.mktemp("board") / "site"
    return build_site(out, root, claims, CARD)


def test_a_damaged_study_is_skipped_and_a_link_is_not_followed(site):
    assert [s.name for s in site.skipped] == ["broken"]
    assert (site.out / "studies" / "toy" / "index.html").is_file()
    assert not (site.out / "studies" / "linked").exists()


def test_every_page_parses_and_every_local_link_and_image_exists(site):
    assert {"index.html", "claims.html", "studies/toy/index.html",
            "methods/control-ppo.html", "methods/tokens-grpo.html"} <= set(site.pages)
    assert broken_links(site.out) == {}
    index = (site.out / "index.html").read_text()
    assert "studies/toy/board_toy_reach.png" in index and "broken" in index


def test_board_cells_hold_the_runs_table_numbers(results, site):
    root, _ = results
    (study,), _ = read_studies(root)
    (board,) = board_module.task_boards(study)
    assert check_board_numbers(board, run_table(root / "toy", study.summary)) == 4
    # ppo keeps 0.3 of its gain, vaco 0.9: vaco would rank first, by its lagged score; the
    # study committed no cell rule, so its board does not rank them.
    assert board_module.ranked(board.scores, board.kept, board.lags) == ["vaco", "ppo"]
    assert board.unranked == "the study committed no cell rule"
    assert board.order == ("ppo", "vaco")
    assert board.kept[("ppo", 2.0)].kept.point == pytest.approx(0.3)
    page = (site.out / "studies" / "toy" / "index.html").read_text()
    assert '<td>ppo</td><td class="number">2</td><td class="number">0.001</td>' in page
    assert "0.300 [" in page and "0.900 [" in page
    assert "Not ranked: the study committed no cell rule; its methods are in name order." in page


def test_the_method_pages_say_the_learning_rate_and_whether_the_mechanism_acted(site):
    ppo = (site.out / "methods" / "control-ppo.html").read_text()
    assert "PureJaxRL" in ppo  # the card's entry
    assert "0.001" in ppo and "clip: 20.0% of samples, acted at 50% of steps" in ppo
    vaco = (site.out / "methods" / "control-vaco.html").read_text()
    assert "filter: never acted" in vaco


def test_a_method_page_tables_its_results_on_every_board_or_says_it_never_ran(site):
    ppo = (site.out / "methods" / "control-ppo.html").read_text()
    results = ppo.split("<h2>Results</h2>", 1)[1].split("<h2>Where it ran</h2>", 1)[0]
    # One row per lag of toy's board: score and kept share as the board has them, unranked.
    assert results.count("<tr>") == 1 + 2
    assert '<td>toy_reach</td><td>ppo</td><td class="number">2</td>' in results
    assert "0.300 [" in results and "not ranked (cell rule)" in results
    assert "0.900 [" not in results  # vaco's kept share is on vaco's page, not ppo's
    never = [p.read_text() for p in (site.out / "methods").glob("*.html")
             if "Not run in any committed study." in p.read_text()]
    assert never and all("<h2>Where it ran</h2>" not in text for text in never)


def test_the_claims_table_lists_every_claim_linking_its_study(site):
    claims = (site.out / "claims.html").read_text()
    assert claims.count("<tr>") == 1 + 2
    assert "Lag hurts ppo on toy_reach." in claims and "Nothing tests this." in claims
    assert 'href="studies/toy/fig_kept_gain.png"' in claims
    # The rule is shown; a cited study the results lack is named, unlinked.
    assert "<blockquote>A study counts where its committed cell rule holds.</blockquote>" in claims
    assert "<td>elsewhere</td>" in claims and "As of 2026-12-07, abc1234" in claims


def test_every_page_carries_the_version_stamp(site):
    for page in site.out.rglob("*.html"):
        text = page.read_text()
        assert "Built from vaco_jax commit" in text and "1 x cpu (cpu backend): 1 study" in text


def test_the_command_refuses_a_folder_it_did_not_write_and_overwrites_only_its_own(
        results, tmp_path, capsys):
    root, claims = results
    args = ["leaderboard", "--results", str(root), "--claims", str(claims)]
    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "mine.txt").write_text("keep me")
    assert main([*args, "--out", str(foreign)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main([*args, "--out", str(root / "board")]) == 2
    assert "inside the results folder" in capsys.readouterr().err
    assert not (root / "board").exists()

    out = tmp_path / "site"
    assert main([*args, "--out", str(out)]) == 0
    captured = capsys.readouterr()
    warnings = captured.err.strip().splitlines()
    assert len(warnings) == 1 and "skipped the study broken" in warnings[0]
    assert "Traceback" not in captured.err
    assert main([*args, "--out", str(out)]) == 2
    # A board is built again, never continued: the refusal offers only what the command has.
    assert capsys.readouterr().err.endswith(
        "already exists and is not empty; pass overwrite (--overwrite) to replace its results\n")
    (out / "mine.txt").write_text("keep me")
    assert main([*args, "--out", str(out), "--overwrite"]) == 2  # a file it did not write
    assert main([*args, "--out", str(out), "--overwrite", "--keep", "mine.txt"]) == 0
    assert (out / "mine.txt").read_text() == "keep me"
    assert (out / "index.html").is_file()


def _copy_with_summary(study: Path, results: Path, summary: dict) -> None:
    """A copy of ``study`` in ``results`` holding ``summary`` as its summary.json."""
    copy = results / study.name
    copy.mkdir(parents=True)
    for name in ("report.md", "runs.parquet", "experiment.toml"):
        (copy / name).write_bytes((study / name).read_bytes())
    (copy / "summary.json").write_text(json.dumps(summary))


def test_a_summary_without_a_field_the_board_reads_is_skipped_naming_it(results, tmp_path):
    root, _ = results
    summary = json.loads((root / "toy" / "summary.json").read_text())
    del summary["cells"][0]["iqm"]
    _copy_with_summary(root / "toy", tmp_path / "results", summary)
    built = build_site(tmp_path / "site", tmp_path / "results", root.parent / "claims.toml",
                       CARD)
    assert [(s.name, "'iqm'" in s.reason) for s in built.skipped] == [("toy", True)]
    assert (built.out / "index.html").is_file() and "toy" in (built.out / "index.html").read_text()


def test_an_algorithm_name_that_is_not_a_file_name_is_skipped_naming_it(results, tmp_path):
    root, _ = results
    summary = json.loads((root / "toy" / "summary.json").read_text())
    summary["run"]["variants"][0]["algo"] = "../ppo"  # would be the page methods/control-../ppo
    _copy_with_summary(root / "toy", tmp_path / "results", summary)
    studies, skipped = read_studies(tmp_path / "results")
    assert studies == [] and [s.name for s in skipped] == ["toy"]
    assert "its algorithm name '../ppo' is not a plain name" in skipped[0].reason


@pytest.fixture(scope="module")
def plugin_results(tmp_path_factory):
    """A study of ppo and plugin_ppo, an algorithm the fidelity card does not describe."""
    root = tmp_path_factory.mktemp("plugin_results")
    write_report(_runs(("ppo", "plugin_ppo")), root / "plugin",
                 reference_scores={"toy_reach": 100.0}, reps=20)
    (root / "plugin" / "experiment.toml").write_text('name = "plugin"\n')
    claims = tmp_path_factory.mktemp("plugin_claims") / "claims.toml"
    claims.write_text(CLAIMS)
    return root, claims


def test_an_installed_plugins_algorithm_has_its_board_row_and_a_page_naming_its_entry_point(
        plugin_results, monkeypatch, tmp_path):
    root, claims = plugin_results
    private_registries(monkeypatch)

    def register_plugin():
        control.ALGORITHMS.register(control.Algorithm(
            "plugin_ppo", control.GAE, control.ALGORITHMS["ppo"].policy_loss))
    fake_entry_points(monkeypatch, ENTRY_POINT_GROUP, {"register_plugin": register_plugin})
    out = tmp_path / "site"
    assert main(["leaderboard", "--results", str(root), "--claims", str(claims),
                 "--out", str(out)]) == 0
    (study,), _ = read_studies(root)
    (board,) = board_module.task_boards(study)
    assert set(board.order) == {"ppo", "plugin_ppo"}  # the rows of its heatmap
    assert "<td>plugin_ppo</td>" in (out / "studies" / "plugin" / "index.html").read_text()
    assert 'href="methods/control-plugin_ppo.html"' in (out / "index.html").read_text()
    page = (out / "methods" / "control-plugin_ppo.html").read_text()
    assert "It has no fidelity card entry" in page and "PureJaxRL" not in page
    assert html.escape("registered by the plugin's entry point 'register_plugin' "
                       "(fake_vaco_plugin:register_plugin) of group 'vaco_jax.algorithms'") in page
    assert 'href="../studies/plugin/index.html"' in page and "clip: 20.0% of samples" in page
    assert "PureJaxRL" in (out / "methods" / "control-ppo.html").read_text()
    assert broken_links(out) == {}


def test_an_algorithm_no_installed_plugin_registers_has_a_page_saying_so(plugin_results,
                                                                         tmp_path):
    root, claims = plugin_results
    built = build_site(tmp_path / "site", root, claims, CARD)
    assert "methods/control-plugin_ppo.html" in built.pages
    page = (built.out / "methods" / "control-plugin_ppo.html").read_text()
    assert ("It has no fidelity card entry: docs/methods/ describes vaco_jax&#x27;s own "
            "algorithms, and no plugin installed where this board was built registers it.") in page


def test_a_study_folder_named_to_act_on_a_terminal_is_warned_of_in_one_plain_line(
        results, tmp_path, capsys):
    _, claims = results
    study = tmp_path / "results" / "red\x1b[31m\nstudy"
    study.mkdir(parents=True)
    (study / "summary.json").write_text("{not json")
    assert main(["leaderboard", "--out", str(tmp_path / "site"), "--results",
                 str(tmp_path / "results"), "--claims", str(claims), "--card", str(CARD)]) == 0
    (warning,) = capsys.readouterr().err.splitlines()
    assert warning.startswith("vaco-jax leaderboard: warning: skipped the study "
                              "red\\x1b[31m\\nstudy: ") and warning.isprintable()


def test_a_summary_whose_scale_is_not_finite_is_not_shown_as_one(results):
    root, _ = results
    (study,), _ = read_studies(root)
    # Only a summary from someone else's folder holds these: the report writer makes none.
    unscaled = {"toy_reach": Normalisation(initial=math.nan, reference=math.inf, source="given")}
    study = dataclasses.replace(study, summary=dataclasses.replace(study.summary,
                                                                   normalisation=unscaled))
    page = pages.study_page(study, [], stamp([study]))
    assert "Normalisation: toy_reach: not normalised.</p>" in page
    assert "nan" not in page and "= inf" not in page


def test_tags_move_a_study_to_the_archive_and_the_index_lists_it(results, tmp_path, capsys):
    root, claims = results
    experiments = tmp_path / "experiments"
    experiments.mkdir()
    (experiments / "toy.toml").write_text('name = "toy"\n')
    tags = tmp_path / "studies.toml"
    tags.write_text('[toy]\ntag = "calibration"\nverdict = "ppo keeps 0.3 at lag 2"\n'
                    '[broken]\ntag = "superseded"\nverdict = "a damaged study"\n')
    index = experiments / "INDEX.md"
    args = ["leaderboard", "--results", str(root), "--claims", str(claims), "--card", str(CARD),
            "--tags", str(tags), "--index", str(index)]
    assert main([*args, "--out", str(tmp_path / "site")]) == 0
    front = (tmp_path / "site" / "index.html").read_text()
    archive = (tmp_path / "site" / "archive.html").read_text()
    assert "studies/toy/board_toy_reach.png" in archive
    assert "studies/toy/board_toy_reach.png" not in front and "archive.html" in front
    page = (tmp_path / "site" / "studies" / "toy" / "index.html").read_text()
    assert "Tagged calibration: ppo keeps 0.3 at lag 2" in page
    written = index.read_text()
    there = Path(os.path.relpath(root / "toy", experiments)).as_posix()
    assert f"| [toy](toy.toml) ([results]({there}/)) | control | none committed | 16 |" in written
    assert "| broken ([results](" in written and "| unreadable (" in written
    assert "## calibration" in written and "ppo keeps 0.3 at lag 2" in written
    capsys.readouterr()
    assert main([*args, "--out", str(tmp_path / "again")]) == 2
    assert f"the index {str(index)!r} exists; pass --overwrite" in capsys.readouterr().err
    assert not (tmp_path / "again").exists()


def test_the_index_lists_the_older_variants_apart_from_the_methods(site):
    index = (site.out / "index.html").read_text()
    methods, _, older = index.partition("<p>Older variants")
    assert 'href="methods/tokens-m2po.html"' in methods
    assert 'href="methods/tokens-m2po_drop.html"' not in methods
    assert 'href="methods/tokens-m2po_drop.html"' in older and "tokens-m2po.html" not in older


def test_a_study_page_renders_its_readme_and_report_with_raw_html_escaped(site):
    page = (site.out / "studies" / "toy" / "index.html").read_text()
    assert "<h2>README</h2><h3>The toy study</h3>" in page
    assert "&lt;script&gt;alert" in page and "<script" not in page
    assert ('<a href="fig_kept_gain.png"><img src="fig_kept_gain.png" alt="kept gain" /></a>'
            in page)
    assert '<a href="runs.parquet">its runs</a>' in page
    assert "secret.txt" not in page and 'href="javascript' not in page
    assert "<h2>Report</h2>" in page and "<pre><code>vaco-jax sweep experiment.toml" in page
    assert "--groups GROUP</code>" in page  # the toy study tunes nothing: no tune- group
    assert "Package versions: " in page and "jax " in page and "Python " in page
