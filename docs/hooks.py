"""MkDocs hooks: show the repository's DESIGN.md and CHANGELOG.md as pages of the site.

A page whose text is ``<!-- include: NAME -->`` gets the file NAME from the repository's
root. Their links to repository files (``[text](safeact/_tool.py)``) have no page on the
site: they become the text itself, so the strict build does not fail on them, while links
to anchors and to the web stay links.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INCLUDE = re.compile(r"^<!-- include: (?P<name>[\w.]+) -->$", re.MULTILINE)
# A code span first, so that ``Box[int](x=1)`` in one stays as it is.
FILE_LINK = re.compile(r"(?P<code>`[^`]*`)|\[(?P<text>[^\]]+)\]\((?!https?:|#)[^)]+\)")


def on_page_markdown(markdown: str, **_: object) -> str:
    """Replace each include line with the named file, its links to files made plain text."""
    return INCLUDE.sub(lambda found: plain((ROOT / found["name"]).read_text()), markdown)


def plain(text: str) -> str:
    """Return ``text`` with each link to a file, outside code spans, made its link text."""
    return FILE_LINK.sub(lambda found: found["code"] or found["text"], text)
