"""Answers and prompts as safe HTML: Markdown with raw HTML escaped, then sanitised again.

An answer may hold HTML, script tags or code. markdown-it renders with `html` off, so any tag in the
text comes out as visible text, and code stays in <pre><code>. nh3 (Ammonia) then cleans the result as
a second fence: no scripts, no event handlers, no javascript: links, no images that load from outside.
"""

from functools import lru_cache

import nh3
from markdown_it import MarkdownIt

_markdown = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable("table")
_allowed_tags = {
    "p", "br", "hr", "pre", "code", "em", "strong", "del", "blockquote", "ul", "ol", "li",
    "h1", "h2", "h3", "h4", "h5", "h6", "a", "table", "thead", "tbody", "tr", "th", "td",
}
_allowed_attributes = {"a": {"href", "title"}, "code": {"class"}, "ol": {"start"}}


@lru_cache(maxsize=4096)  # the same answers are shown to several reviewers
def markdown_to_safe_html(text: str) -> str:
    return nh3.clean(
        _markdown.render(text),
        tags=_allowed_tags,
        attributes=_allowed_attributes,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )
