"""Markdown rendered to HTML for the board: the card's method pages and a study's README and
report. A study folder may be someone else's, so its Markdown is untrusted: it is parsed by
markdown-it-py (CommonMark and tables) with raw HTML off, so that any HTML in it is shown as
text; a link or image is kept only where ``target`` maps it to a file or page the board has (or
the link is to the web), otherwise its text stays without the link, so the board never links
to what it does not hold; an image is shown only from a file the board holds.
"""

from __future__ import annotations

from collections.abc import Callable

from markdown_it import MarkdownIt
from markdown_it.token import Token

WEB = ("https://", "http://")
_PARSER = MarkdownIt("commonmark", {"html": False}).enable("table")

Target = Callable[[str], "str | None"]
"""A link's target as written -> where it points on the board, or None for one the board does
not hold."""


def web_only(target: str) -> str | None:
    """Links to the web only."""
    return target if target.startswith(WEB) else None


def _text(content: str) -> Token:
    token = Token("text", "", 0)
    token.content = content
    return token


def _link(href: str, children: list[Token]) -> list[Token]:
    opening = Token("link_open", "a", 1)
    opening.attrSet("href", href)
    return [opening, *children, Token("link_close", "a", -1)]


def _kept_links(children: list[Token], target: Target) -> list[Token]:
    """An inline token's children with each link and image mapped by ``target``: a link to
    nothing the board holds loses its tags (its text stays). An image is shown only where it is
    a file the board holds (never fetched from the web, which would let a study's author see
    who reads the board and change what it shows), linked to itself so that a figure shrunk to
    the page's width opens full size on click; any other becomes its alt text, a link where
    ``target`` keeps its address."""
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
            source = str(token.attrGet("src") or "")
            where = target(source)
            alt = [_text(_PARSER.renderer.renderInlineAsText(token.children or [], {}, {}))]
            inside_link = not all(dropped)  # a kept link is open: no link inside it
            if where is None or source.startswith(WEB):
                kept += alt if where is None or inside_link else _link(where, alt)
                continue
            token.attrSet("src", where)
            kept += [token] if inside_link else _link(where, [token])
            continue
        kept.append(token)
    return kept


def render(markdown: str, target: Target = web_only, *, shift_headings: int = 1) -> str:
    """``markdown`` as HTML, each link and image through ``target``, headings moved down
    ``shift_headings`` levels (at most h6) to sit under the page's own title."""
    tokens = _PARSER.parse(markdown)
    for token in tokens:
        if token.type in ("heading_open", "heading_close"):
            token.tag = f"h{min(6, int(token.tag[1]) + shift_headings)}"
        elif token.type == "inline" and token.children:
            token.children = _kept_links(token.children, target)
    return _PARSER.renderer.render(tokens, _PARSER.options, {})
