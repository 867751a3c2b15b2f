"""The study tags (`experiments/results/studies.toml`) and the experiments index written from them
(`experiments/INDEX.md`): every experiment file and study tagged, the committed index what the
code writes, a damaged tags file refused naming its entry."""

from __future__ import annotations

import pytest

from vaco_jax.leaderboard.index import index_markdown, unindexed
from vaco_jax.leaderboard.tags import read_tags

from site_checks import RESULTS, ROOT, TAGS

EXPERIMENTS = ROOT / "experiments"


def test_every_experiment_file_and_study_is_tagged_and_every_study_has_its_file():
    assert unindexed(EXPERIMENTS, RESULTS, read_tags(TAGS)) == {
        "untagged": [], "tagged, but neither a file nor a study": [],
        "a study without its experiment file": []}


def test_the_committed_index_is_the_one_the_tags_and_studies_give():
    """Regenerate with `vaco-jax leaderboard --out board --index experiments/INDEX.md
    --overwrite` after a study lands or a tag changes."""
    written = index_markdown(EXPERIMENTS, RESULTS, read_tags(TAGS))
    assert (EXPERIMENTS / "INDEX.md").read_text() == written
    assert "| [tokens_long_main](tokens_long_main.toml) ([results](results/tokens_long_main/)) " \
           "| tokens | holds on add_steps, sort (2 of 3 tasks) |" in written


@pytest.mark.parametrize("text, message", [
    ('[a]\ntag = "headline"\nverdict = "x"\n', r"a\.tag: 'headline' is not one of main, "),
    ('[a]\ntag = "main"\n', r"a\.verdict: missing"),
    ('[a]\ntag = "main"\nverdict = "  "\n', r"a\.verdict: is empty"),
    ('[a]\ntag = "main"\nverdict = "' + "x" * 201 + '"\n', r"over the 200 allowed"),
    ('[a]\ntag = "main"\nverdict = "x"\nwhy = "y"\n', r"a: holds the unknown key why"),
    ('a = "main"\n', r"a: must be a table"),
    ('["../a"]\ntag = "main"\nverdict = "x"\n', r"is not a plain name"),
])
def test_a_damaged_tags_file_is_refused_naming_the_entry(tmp_path, text, message):
    path = tmp_path / "studies.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=r"cannot read the study tags .*" + message):
        read_tags(path)


def test_a_damaged_record_in_a_study_folder_is_a_row_saying_so(tmp_path):
    experiments, results = tmp_path / "experiments", tmp_path / "experiments" / "results"
    (results / "x").mkdir(parents=True)
    (results / "x" / "parts.json").write_text('{"complete": 1')
    (experiments / "x.toml").write_text('testbed = ["tokens"\n')
    (results / "studies.toml").write_text('[x]\ntag = "main"\nverdict = "damaged"\n')
    text = index_markdown(experiments, results, read_tags(results / "studies.toml"))
    row = next(line for line in text.splitlines() if line.startswith("| [x]"))
    assert row.count("unreadable (") == 2 and row.endswith("| damaged |")
