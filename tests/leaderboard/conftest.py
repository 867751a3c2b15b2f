"""The board of the committed studies, built once per session for the tests that check it and
for those that drive it in a browser."""

from __future__ import annotations

import pytest

from vaco_jax.leaderboard.site import Built, build_site
from vaco_jax.leaderboard.tags import read_tags

from site_checks import CARD, CLAIMS, RESULTS, TAGS


@pytest.fixture(scope="session")
def committed_board(tmp_path_factory) -> Built:
    """Draws a figure per study and task: about 40 seconds on 2 cores."""
    return build_site(tmp_path_factory.mktemp("board") / "site", RESULTS, CLAIMS, CARD,
                      tags=read_tags(TAGS))
