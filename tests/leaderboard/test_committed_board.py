"""The leaderboard built from the committed studies (experiments/results) and claims."""

from __future__ import annotations

import html
import tomllib
from pathlib import Path

import pytest

from vaco_jax.leaderboard.board import task_boards
from vaco_jax.leaderboard.claims import read_claims
from vaco_jax.leaderboard.site import build_site
from vaco_jax.leaderboard.studies import read_studies

from site_checks import broken_links, check_board_numbers, run_table

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "experiments" / "results"
CLAIMS = ROOT / "experiments" / "results" / "claims.toml"
CHECKED_STUDIES = ("quick", "tokens_lag_scan")
"""Studies small enough to score again from their runs tables in a test."""

pytestmark = pytest.mark.slow  # draws a figure per study and task: about a minute on 2 cores


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return build_site(tmp_path_factory.mktemp("board") / "site", RESULTS, CLAIMS,
                      ROOT / "docs" / "fidelity.md")


@pytest.fixture(scope="module")
def studies(site):
    """The studies the board shows (those it skipped are named on its index)."""
    found, _ = read_studies(RESULTS)
    skipped = {s.name for s in site.skipped}
    return {study.name: study for study in found if study.name not in skipped}


def test_every_committed_study_is_shown_and_every_local_link_and_image_exists(site):
    assert site.skipped == ()
    assert broken_links(site.out) == {}


def test_every_study_with_a_kept_gain_has_its_board_on_the_index(site, studies):
    index = (site.out / "index.html").read_text()
    for study in studies.values():
        for board in task_boards(study):
            assert f"studies/{study.slug}/{board.stem}.png" in index


@pytest.mark.parametrize("name", CHECKED_STUDIES)
def test_board_cells_hold_the_runs_table_numbers(studies, name):
    study = studies[name]
    runs = run_table(study.folder, study.summary)
    assert sum(check_board_numbers(board, runs) for board in task_boards(study)) > 0


def test_the_claims_table_lists_every_claim(site):
    claims = read_claims(CLAIMS)
    assert [c.id for c in claims] == list(range(1, 18))
    page = (site.out / "claims.html").read_text()
    for claim in claims:
        assert html.escape(claim.claim) in page


def test_every_claim_names_committed_studies_and_their_figures(studies):
    for claim in tomllib.loads(CLAIMS.read_text())["claim"]:
        assert all(name in studies for name in claim["studies"]), claim["id"]
        if claim["figure"]:
            assert claim["figure"] in studies[claim["studies"][0]].figures, claim["id"]
