"""The board's Markdown: a study's README and report and the card's pages are untrusted text,
rendered with raw HTML shown as text and links kept only to what the board holds."""

import types

from vaco_jax.leaderboard.card import Entry, Method, card_target
from vaco_jax.leaderboard.markdown import render
from vaco_jax.leaderboard.pages import _study_target as study_target

# A study page's links: the files the board carries beside it, or the web.
_study_target = study_target(types.SimpleNamespace(files=("report.md", "runs.parquet"),
                                                   figures=("fig_kept_gain.png",)))


def test_raw_html_is_shown_as_text():
    html = render("<script>alert(1)</script>\n\nA <b>bold</b> claim <img src=x onerror=y>.")
    assert "<script" not in html and "<b>" not in html and "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;b&gt;bold&lt;/b&gt;" in html


def test_a_link_is_kept_only_to_what_the_board_holds_or_the_web():
    html = render("[figure](fig_kept_gain.png), [secret](../../../etc/passwd), "
                  "[script](javascript:alert(1)), [docs](docs/methods/index.md), "
                  "[paper](https://arxiv.org/abs/2602.17616)", _study_target)
    assert '<a href="fig_kept_gain.png">figure</a>' in html
    assert '<a href="https://arxiv.org/abs/2602.17616">paper</a>' in html
    for gone in ("passwd", 'href="javascript', "docs/methods"):
        assert gone not in html
    assert "secret" in html and "script" in html and "docs" in html  # their text stays
    assert html.count("<a ") == 2


def test_an_image_the_board_holds_opens_full_size_and_another_becomes_its_alt_text():
    html = render("![kept gain](fig_kept_gain.png) ![elsewhere](../other/fig.png) "
                  "![**bold** alt](https://tracker.example/p.png)", _study_target)
    assert ('<a href="fig_kept_gain.png"><img src="fig_kept_gain.png" alt="kept gain" /></a>'
            in html)
    assert "../other" not in html and "elsewhere" in html
    # A web image is never fetched: its alt text links to it instead.
    assert html.count("<img") == 1 and '<a href="https://tracker.example/p.png">bold alt</a>' in html


def test_an_image_inside_a_kept_link_is_not_wrapped_in_a_second_link():
    html = render("[![kept gain](fig_kept_gain.png)](https://example.org)", _study_target)
    assert html.count("<a ") == 1 and '<img src="fig_kept_gain.png"' in html


def test_a_carried_file_is_found_written_with_dot_slash_or_a_section():
    html = render("[report](./report.md#kept-gain) [runs](runs.parquet?raw=1)", _study_target)
    assert '<a href="report.md#kept-gain">report</a>' in html and "raw=1" not in html


def test_headings_move_under_the_page_s_own_and_tables_render():
    html = render("# Title\n\n## Part\n\n| a | b |\n|---|---|\n| 1 | 2 |\n", shift_headings=2)
    assert "<h3>Title</h3>" in html and "<h4>Part</h4>" in html and "<h1>" not in html
    assert "<td>1</td>" in html


def test_nested_bullets_of_the_card_render_as_nested_lists():
    html = render("- **Paper:** one.\n  - Not changed: a long item\n    wrapped onto a line.\n"
                  "- `code` last.")
    assert html.count("<ul>") == 2 and "<strong>Paper:</strong>" in html
    assert "a long item\nwrapped onto a line." in html and "<code>code</code>" in html


def test_a_card_page_links_another_method_s_page_on_the_board():
    entry = Entry("tokens", "m2po_drop", "")
    target = card_target(Method("tokens", "m2po_drop", entry, None),
                         {"tokens-m2po", "tokens-vaco", "control-vaco"})
    assert target("m2po.md") == "tokens-m2po.html"
    assert target("../control/vaco.md") == "control-vaco.html"
    assert target("gspo.md") is None  # no page on this board
    assert target("../../algorithms.md") is None and target("https://x.org") == "https://x.org"
