"""Text that someone else wrote (an annotator's answer, a label, a reason), made inert in Markdown.

:func:`escape` keeps what the text says and shows it verbatim in any CommonMark / GitHub
renderer: it can open no heading, list, quote or table row (line breaks become spaces), end
no table cell, and make no emphasis, code, link, image, autolink, raw HTML, entity,
strikethrough or math. Plain words, numbers, ids and sentences come out unchanged, so the
report stays readable as text; the characters that could build markup get a backslash.
"""
from __future__ import annotations

import re

# Always escaped: they open or close markup wherever they stand.
_ALWAYS = frozenset("\\`*[]<|~&$#")
# Line breaks of every kind (a new line could start a heading, a list, a table row).
_BREAKS = re.compile(r"\r\n|[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]")
# Autolinks: a scheme's ``://`` (GitHub's extended autolinks), and the dot of anything shaped like a
# domain name (``www.x``, ``evil.example``: GitHub's and linkify's); a decimal point stays as it is.
_SCHEME = re.compile(r":(?=//)")
_DOMAIN_DOT = re.compile(r"(?<=[^\W_])\.(?=[^\W\d_])")


def escape(value: object) -> str:
    """``value`` as Markdown text that renders as exactly its characters (line breaks as spaces)."""
    text = _BREAKS.sub(" ", str(value))
    out = []
    for i, ch in enumerate(text):
        if ch in _ALWAYS:
            out.append("\\" + ch)
        elif ch == "_" and not (0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()):
            out.append("\\_")  # an underscore inside a word (sample ids) opens no emphasis
        elif ch == "@":
            out.append("\\@")  # an e-mail autolink
        else:
            out.append(ch)
    text = "".join(out)
    return _DOMAIN_DOT.sub(r"\\.", _SCHEME.sub(r"\\:", text))
