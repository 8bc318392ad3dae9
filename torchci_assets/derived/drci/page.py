"""The Dr. CI comment as a section of the HUD's `pr/<n>.html`: the same text, as HTML.

The body is Markdown with a few HTML tags of our own (details, summary, p, b); everything in it
that came from CI (job names, test names, log lines) is escaped, then only inline code, and outside
it those tags and links, are turned back into markup: inside a code span they stay text, as on
GitHub. Emoji shortcodes become the characters GitHub shows.
"""

from __future__ import annotations

import re
from html import escape

from torchci_assets.derived.drci.comment import MARKER_END, MARKER_START

EMOJI = {":x:": "❌", ":white_check_mark:": "✅", ":hourglass_flowing_sand:": "⏳", ":green_heart:": "💚",
         ":link:": "🔗", ":test_tube:": "🧪", ":warning:": "⚠️"}
_TAGS = re.compile(r"&lt;(/?)(details|summary|p|b)( open)?&gt;")
_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^)\s]+)\)")
_CODE = re.compile(r"`([^`\n]+)`")
SECTION_ID = "drci"


def _markup(text: str) -> str:
    """Escaped text outside code spans with our tags, links and emoji made live again."""
    text = _TAGS.sub(lambda m: f"<{m[1]}{m[2]}{m[3] or ''}>", text)
    text = _LINK.sub(lambda m: f'<a href="{m[2]}">{m[1]}</a>', text)
    for code, char in EMOJI.items():
        text = text.replace(code, char)
    return text


def _line(line: str) -> str:
    # code spans first, as GitHub reads them: a log line in one (text the pull request's own code
    # printed) stays literal, whatever links or tags it spells
    parts = _CODE.split(escape(line.strip(), quote=True))
    text = "".join(f'<code class="mono">{part}</code>' if i % 2 else _markup(part) for i, part in enumerate(parts))
    if line.startswith("## "):
        return f"<h3>{text[3:]}</h3>"
    if line.startswith("### "):
        return f"<h4>{text[4:]}</h4>"
    if line.startswith("* "):
        return f"<li>{text[2:]}"
    if line.startswith("    "):
        return f"<br>{text}</li>"
    return text + ("<br>" if text and not text.endswith(">") else "")


def to_html(body: str) -> str:
    """The comment body (markers and all) as an HTML fragment."""
    inner = body.replace(MARKER_START, "").replace(MARKER_END, "")
    return "\n".join(_line(line) for line in inner.strip().splitlines())


def drci_section(body: str | None) -> str:
    """`<section id="drci">` for the PR page; a note when the pull request has no comment yet."""
    if not body:
        return (f'<section id="{SECTION_ID}"><h2>Dr. CI</h2>'
                '<p class="empty">No Dr. CI comment for this head yet.</p></section>')
    return f'<section id="{SECTION_ID}"><h2>Dr. CI</h2><div class="drci">{to_html(body)}</div></section>'


def with_drci_section(page: str, body: str | None) -> str:
    """The PR page with the Dr. CI section at the end of its main content."""
    return page.replace("</main>", drci_section(body) + "</main>", 1)
