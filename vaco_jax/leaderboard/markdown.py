"""Markdown rendered to HTML for the board: the card's method pages and a study's README and
report. A study folder may be someone else's, so its Markdown is untrusted: it is parsed by
markdown-it-py (CommonMark and tables) with raw HTML off, so that any HTML in it is shown as
text; a link or image is kept only where ``target`` maps it to a file or page the board has (or
the link is to the web), otherwise its text stays without the link, so the board never links
to what it does not hold. An image links to itself, so that a figure shrunk to the page's width
opens full size on click.
"""

from __future__ import annotations

from collections.abc import Callable

from markdown_it import MarkdownIt
from markdown_it.token import Token

WEB = ("https://", "http://")
_PARSER = MarkdownIt("commonmark", {"html": False}).enable("table")

Target = Callable[[str], "str | None"]
"""A link's or image's target as written -> where it points on the board, or None for one the
board does not hold."""


def no_target(target: str) -> str | None:
    """Links to the web only."""
    return target if target.startswith(WEB) else None


def _kept_links(children: list[Token], target: Target) -> list[Token]:
    """An inline token's children with each link and image mapped by ``target``: a link to
    nothing the board holds loses its tags (its text stays), an image becomes its alt text."""
    kept: list[Token] = []
    dropped: list[bool] = []  # per open link: whether its tags were dropped
    for token in children:
        if token.type == "link_open":
            where = target(str(token.attrGet("href") or ""))
            dropped.append(where is None)
            if where is None:
                continue
            token.attrSet("href", where)
        elif token.type == "link_close":
            if dropped.pop():
                continue
        elif token.type == "image":
            where = target(str(token.attrGet("src") or ""))
            if where is None:
                text = Token("text", "", 0)
                text.content = token.content
                kept.append(text)
                continue
            token.attrSet("src", where)
            # Full size on click: the page shrinks a wide figure to its width.
            opening = Token("link_open", "a", 1)
            opening.attrSet("href", where)
            kept += [opening, token, Token("link_close", "a", -1)]
            continue
        kept.append(token)
    return kept


def render(markdown: str, target: Target = no_target, *, shift_headings: int = 1) -> str:
    """``markdown`` as HTML, each link and image through ``target``, headings moved down
    ``shift_headings`` levels (at most h6) to sit under the page's own title."""
    tokens = _PARSER.parse(markdown)
    for token in tokens:
        if token.type in ("heading_open", "heading_close"):
            token.tag = f"h{min(6, int(token.tag[1]) + shift_headings)}"
        elif token.type == "inline" and token.children:
            token.children = _kept_links(token.children, target)
    return _PARSER.renderer.render(tokens, _PARSER.options, {})
