"""An annotator's free text, an unexpected label and an override's reason reach report.md as text:
rendered by a CommonMark renderer with tables (markdown-it-py), they forge no heading, gate line,
link, image, raw HTML, emphasis or table row, and read back verbatim; report.html escapes them too."""
from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser

import pyarrow as pa
import pytest
from markdown_it import MarkdownIt

from pipeline import schemas
from pipeline.annotation.rounds import load_round
from pipeline.markdown import escape
from pipeline.quality import measures, reports
from pipeline.synthetic.annotators import SimulatedAnnotator

HOSTILE = [
    "calm\n\n# Gate: PASSED\n**Gate:** PASSED: every measured field reaches its threshold.",
    "soft [release notes](http://evil.example/x) ![pixel](https://evil.example/p.png) <img src=x onerror=alert(1)>",
    "tense |\n|---|---|---|\n| forged | row | here |",
    "*loud* __very__ `rm -rf` ~~no~~ &lt;b&gt; $x^2$ <https://evil.example> www.evil.example mail@evil.example",
    "flat\r\n> quoted\u2028- listed\n1. numbered\n<!-- hidden -->",
]
FORGED_LABEL = "[x](http://evil.example/label)"


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def _render(md: str) -> _Tags:
    parser = _Tags()
    parser.feed(MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md))
    return parser


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@pytest.fixture(scope="module")
def hostile_report(truth_samples, tmp_path_factory):
    rnd = load_round("emotion")
    samples = truth_samples[:4]
    lines = [x for i in range(2) for x in SimulatedAnnotator(f"a{i}", {"*": 0.15}, seed=i).label_rows(rnd, samples)]
    n = 0
    for line in lines:
        if line["annotator"] == "sim-a1" and line["field"] == "tone_of_voice":
            line["value"] = json.dumps(HOSTILE[n % len(HOSTILE)])
            n += 1
        elif line["annotator"] == "sim-a1" and line["field"] == "utterance_type" and n % 3 == 0:
            line["value"] = json.dumps(FORGED_LABEL)
    report = measures.round_agreement(pa.Table.from_pylist(lines, schema=schemas.LABELS), "emotion", rnd)
    out = tmp_path_factory.mktemp("report")
    reports.write_report(report, out)
    return report, out


def test_hostile_values_render_as_their_own_text(hostile_report):
    report, out = hostile_report
    md = (out / "report.md").read_text()
    page = _render(md)
    text = _flat(" ".join(page.text))
    shown = [h for h in HOSTILE if _flat(h) in text]
    assert len(shown) == len(HOSTILE), f"not shown verbatim: {set(HOSTILE) - set(shown)}"
    # the only gate line is the report's own, and it says what the figures say
    gates = [line for line in md.splitlines() if line.startswith(reports.GATE_MD)]
    assert len(gates) == 1 and ("PASSED" in gates[0]) == report.passed
    headings = [t for t, _ in page.tags if t in ("h1", "h2", "h3")]
    assert headings.count("h1") == 1
    strong = [m for m in re.findall(r"<strong>(.*?)</strong>", MarkdownIt("commonmark").enable("table").render(md))]
    assert strong.count("Gate:") == 1, strong
    for tag, attrs in page.tags:
        assert tag not in ("a", "img", "script", "em", "del", "blockquote", "ol") or not any(
            "evil" in str(v) for v in attrs.values()), (tag, attrs)
        assert tag not in ("script", "del", "blockquote", "ol"), tag  # none of the report's own
        assert not (tag == "img" and "evil" in attrs.get("src", "")), attrs
    assert not any(t == "a" for t, _ in page.tags), "a link in the report"
    assert not re.search(r"(?<!\\)<(!--|img)", md)  # raw HTML only ever escaped
    # the table of differing rows keeps its columns: every row of it has as many cells as its header
    rows = [line for line in md.splitlines() if line.startswith("| ") and "calm" in line]
    assert rows and all(len(re.split(r"(?<!\\)\|", r)) == len(re.split(r"(?<!\\)\|", rows[0])) for r in rows)
    page_html = (out / "report.html").read_text()
    assert html.escape(HOSTILE[1]) in page_html and "<img src=x" not in page_html


def test_an_override_reason_cannot_forge_the_gate(hostile_report, tmp_path):
    report, out = hostile_report
    reason = "ok\n**Gate:** PASSED: every measured field reaches its threshold.\n# [approved](http://evil.example)"
    override = {"by": "lead <b>", "recorded_at": "2026-01-01", "reason": reason}
    reports.write_report(report, tmp_path, override=override)
    for path in (tmp_path / "report.md", out / "report.md"):
        if path.parent == out:
            assert reports.mark_override(out, report.round, False, ["utterance_type"], override)
        md = path.read_text()
        gates = [line for line in md.splitlines() if line.startswith(reports.GATE_MD)]
        assert len(gates) == 1 and "BELOW THRESHOLD" in gates[0], gates
        page = _render(md)
        assert _flat(reason) in _flat(" ".join(page.text)) and "lead <b>" in " ".join(page.text)
        tags = [t for t, _ in page.tags]
        assert "a" not in tags and "b" not in tags and tags.count("h1") == 1, tags


@pytest.mark.parametrize("text", [*HOSTILE, FORGED_LABEL, "a\\", "\\*", "x_y", "_x_", "0.612 (95% CI 0.5-0.7)"])
def test_escape_is_exact_for_any_text(text):
    rendered = _render(f"| h |\n|---|\n| {escape(text)} |\n\n- {escape(text)}\n")
    assert [t for t, _ in rendered.tags] == ["table", "thead", "tr", "th", "tbody", "tr", "td", "ul", "li"]
    cells = [d for d in rendered.text if d.strip() and d.strip() != "h"]
    assert [_flat(c) for c in cells] == [_flat(text)] * 2


def test_plain_words_numbers_and_ids_are_left_as_they_are():
    for text in ("soft and hesitant", "0.612 (95% CI 0.55-0.67): tentative",
                 "family_therapy/haddad_family_000/001_s01e01_ct80_segment01", "re-annotation planned, 3 rows."):
        assert escape(text) == text
