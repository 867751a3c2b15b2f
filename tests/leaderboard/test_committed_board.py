"""The leaderboard built from the committed studies (experiments/results) and claims."""

from __future__ import annotations

import html

import pytest

from vaco_jax.leaderboard.board import task_boards
from vaco_jax.leaderboard.claims import read_claims
from vaco_jax.leaderboard.studies import read_studies
from vaco_jax.leaderboard.tags import read_tags

from site_checks import (CLAIMS, RESULTS, ROOT, TAGS, broken_links, check_board_numbers,
                         run_table)

CHECKED_STUDIES = ("quick", "tokens_lag_scan")
"""Studies small enough to score again from their runs tables in a test."""

pytestmark = pytest.mark.slow  # builds the committed board (conftest.py)


@pytest.fixture(scope="module")
def studies(committed_board):
    """The studies the board shows (those it skipped are named on its index)."""
    found, _ = read_studies(RESULTS)
    skipped = {s.name for s in committed_board.skipped}
    return {study.name: study for study in found if study.name not in skipped}


def test_every_committed_study_is_shown_and_every_local_link_and_image_exists(committed_board):
    assert committed_board.skipped == ()
    assert broken_links(committed_board.out) == {}


def test_every_study_s_board_is_on_the_front_page_or_the_archive_by_its_tag(committed_board,
                                                                             studies):
    tags = read_tags(TAGS)
    index = (committed_board.out / "index.html").read_text()
    archive = (committed_board.out / "archive.html").read_text()
    for study in studies.values():
        front = tags[study.tag_name].front
        for board in task_boards(study):
            image = f"studies/{study.slug}/{board.stem}.png"
            assert (image in index, image in archive) == (front, not front), study.name
    assert "studies/tokens_long_main/" in index and "control_lag_cell_calibration8" in archive
    page = (committed_board.out / "studies" / "control_calibration" / "index.html").read_text()
    assert "Tagged calibration: 1e-3 chosen for control_vaco_lag" in page


@pytest.mark.parametrize("name", CHECKED_STUDIES)
def test_board_cells_hold_the_runs_table_numbers(studies, name):
    study = studies[name]
    runs = run_table(study.folder, study.summary)
    assert sum(check_board_numbers(board, runs) for board in task_boards(study)) > 0


def test_the_claims_table_lists_every_claim(committed_board):
    claims = read_claims(CLAIMS)
    assert [c.id for c in claims.claims] == list(range(1, 18))
    page = (committed_board.out / "claims.html").read_text()
    assert html.escape(claims.rule) in page
    for claim in claims.claims:
        assert html.escape(claim.claim) in page


def test_every_claim_names_committed_studies_checks_and_figures(studies):
    for claim in read_claims(CLAIMS).claims:
        assert all(name in studies for name in claim.studies + claim.evidence), claim.id
        if claim.figure:
            assert claim.figure in studies[claim.figure_study].figures, claim.id
        for check in claim.checks:  # a test (path::name) or a committed benchmark result
            path, _, name = check.partition("::")
            assert (ROOT / path).exists(), claim.id
            assert not name or f"def {name}(" in (ROOT / path).read_text(), claim.id


@pytest.mark.parametrize("name", ("control_long_lag", "tokens_long_main", "quick_tuned"))
def test_a_tuned_study_shows_each_method_s_tuned_rate_on_each_task(committed_board, studies,
                                                                    name):
    study = studies[name]
    chosen = {(c.group, c.chosen) for c in study.summary.tuning.choices}
    for board in task_boards(study):
        page = (committed_board.out / "studies" / study.slug / "index.html").read_text()
        assert "testbed default" not in page
        for variant in study.summary.run.variants:
            shown = study.learning_rates(variant, board.task)
            if shown == "not tuned on this task":
                continue
            group = f"tune-{board.task}-{variant.algo}-e{variant.epochs}m{variant.minibatches}"
            assert shown == f"{next(v for g, v in chosen if g == group):g}, tuned"
            assert f">{html.escape(shown)}</td>" in page


def test_a_board_ranks_only_where_its_study_s_cell_rule_holds(studies):
    boards = {board.task: board for board in task_boards(studies["tokens_long_main"])}
    assert boards["add_steps"].unranked is None and boards["sort"].unranked is None
    assert boards["chain"].unranked == "its committed cell rule does not hold on chain"
    assert list(boards["chain"].order) == sorted(boards["chain"].order)
    for board in task_boards(studies["control_long_lag"]):  # fails its rule on every task
        assert board.unranked and list(board.order) == sorted(board.order)


def test_an_incomplete_merge_is_marked_and_carries_its_parts_record(committed_board, studies):
    study = studies["control_long_lag"]
    page = (committed_board.out / "studies" / study.slug / "index.html").read_text()
    assert study.incomplete and f"Incomplete: {html.escape(study.incomplete)}." in page
    assert (committed_board.out / "studies" / study.slug / "parts.json").is_file()
    assert studies["quick"].incomplete is None and "parts.json" not in studies["quick"].files


def test_the_front_tables_hold_the_main_studies_cells_where_their_rule_holds(committed_board):
    import csv
    import json
    with open(committed_board.out / "cells.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    saved = json.loads((committed_board.out / "board.json").read_text())
    assert len(saved["cells"]) == len(rows) and saved["columns"] == list(rows[0])
    main = {(r["study"], r["task"]) for r in rows if r["tag"] == "main" and r["ranked"] == "True"}
    assert ("tokens_long_main", "add_steps") in main and ("tokens_long_main", "sort") in main
    assert ("tokens_long_main", "chain") not in main
    index = (committed_board.out / "index.html").read_text()
    front = index[index.index("Where the cell holds"):index.index("</script>")]
    grpo_32 = next(r for r in rows if (r["study"], r["task"], r["method"], r["lag"])
                   == ("tokens_long_main", "add_steps", "grpo", "32.0"))
    assert f'data-sort="{float(grpo_32["kept"])!r}"' in front
    assert "<td>chain</td>" not in front
