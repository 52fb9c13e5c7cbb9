"""Templates and the filters they use. Every value is escaped and every string is cut.

Agent output, log lines and error messages are attacker-controlled, so: autoescape is on for
every template; ``finalize`` cuts any string a template prints to ``MAX_VALUE`` characters
(a 1 MB line shows as its start and how much was left out); Markdown (escalation files) is
rendered with raw HTML off, images off, and links only to http(s), mailto and local paths;
a link from data is shown only when it is http(s).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup

MAX_VALUE = 2000  # characters of any one value printed
MAX_BLOCK = 200_000  # characters of a block (run file, seed body) explicitly allowed more
TEMPLATES = Path(__file__).parent / "templates"


def cut(value: Any, limit: int = MAX_VALUE) -> Any:
    if isinstance(value, Markup) or not isinstance(value, str) or len(value) <= limit:
        return value
    return f"{value[:limit]}… [{len(value) - limit} more characters cut]"


def short(value: Any, limit: int = 48) -> str:
    """A name shortened for a table cell (the whole one goes in its title)."""
    text = str(value or "")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def block(value: Any) -> Markup:
    """A long text (a run file, a log) escaped and cut at ``MAX_BLOCK``, not ``MAX_VALUE``."""
    plain = value.unescape() if isinstance(value, Markup) else str(value or "")
    return Markup.escape(cut(plain, MAX_BLOCK))


def _finalize(value: Any) -> Any:
    if value is None:
        return ""
    return cut(value)


def age(ts: Any, now: float | None = None) -> str:
    """``42s ago``, ``5m ago`` … from a Unix time; ``-`` for none."""
    try:
        t = float(ts)
    except (TypeError, ValueError):
        return "-"
    if t <= 0:
        return "-"
    s = max(0, int((time.time() if now is None else now) - t))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit} ago"
    return f"{s}s ago"


def seconds(value: Any) -> str:
    try:
        s = float(value)
    except (TypeError, ValueError):
        return "-"
    return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"


def utc(ts: Any) -> str:
    try:
        return datetime.fromtimestamp(float(ts), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (TypeError, ValueError, OverflowError, OSError):
        return str(ts or "-")


def web_url(value: Any) -> str:
    """``value`` if it is an http(s) URL a page may link to, else ''."""
    if not isinstance(value, str) or len(value) > 2000:
        return ""
    try:
        parts = urlsplit(value.strip())
    except ValueError:
        return ""
    return value.strip() if parts.scheme in ("http", "https") and parts.netloc else ""


def query(base: dict[str, Any], **changes: Any) -> str:
    merged = {k: v for k, v in {**base, **changes}.items() if v not in (None, "", 0)}
    return ("?" + urlencode(merged)) if merged else ""


def _link_ok(url: str) -> bool:
    u = url.strip().lower()
    if u.startswith(("http://", "https://", "mailto:")):
        return True
    # Relative and local links only; "//host" is another site, a scheme is a script or a file.
    return not u.startswith("//") and ":" not in u.split("/", 1)[0]


@cache
def _markdown() -> Any:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.disable(["image", "html_block", "html_inline"])
    md.validateLink = _link_ok

    def link_open(renderer: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
        tokens[idx].attrSet("rel", "noopener noreferrer nofollow")
        return str(renderer.renderToken(tokens, idx, options, env))

    md.add_render_rule("link_open", link_open)
    return md


def markdown(text: Any) -> Markup:
    """Markdown as safe HTML: markdown-it escapes every text and attribute it renders."""
    source = cut(str(text or ""), MAX_BLOCK)
    return Markup(_markdown().render(source))  # noqa: S704 - escaped by markdown-it, html off


@cache
def environment() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(
        default=True, default_for_string=True), finalize=_finalize, trim_blocks=True,
        lstrip_blocks=True)
    env.filters.update(cut=cut, block=block, short=short, age=age, utc=utc, web_url=web_url,
                       markdown=markdown, seconds=seconds)
    env.globals.update(query=query, MAX_BLOCK=MAX_BLOCK)
    return env


def render(name: str, **context: Any) -> str:
    return environment().get_template(name).render(**context)
