"""The agreement report speaks the annotators' language: evidence rows by the 1-based numbers
annotators and the adjudicator pick, labels in the words their buttons show ("no clear pattern",
not ``""``; "Pursue / withdraw", not ``pursue_withdraw``), code as code (no literal backticks in
report.md as rendered, nor in report.html), and plots whose titles and names are never cut at the
picture's edge (two long e-mails in a confusion matrix's title)."""
from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import matplotlib.image as mpimg
import numpy as np
import pyarrow as pa
import pytest
from markdown_it import MarkdownIt

from pipeline import schemas
from pipeline.annotation.rounds import load_round
from pipeline.quality import measures, reports
from pipeline.synthetic.annotators import SimulatedAnnotator

PEOPLE = ("annotator.number.one@example.org", "annotator.number.two@example.org")


class _Text(HTMLParser):
    def __init__(self):
        super().__init__()
        self.text: list[str] = []

    def handle_data(self, data):
        self.text.append(data)


def _text_of(html_text: str) -> str:
    parser = _Text()
    parser.feed(html_text)
    return "".join(parser.text)


@pytest.fixture(scope="module")
def relation_report(truth_samples, tmp_path_factory):
    rnd = load_round("relation")
    samples = truth_samples[:8]
    lines = []
    for person, (i, error) in zip(PEOPLE, enumerate((0.0, 0.4))):
        for line in SimulatedAnnotator(f"a{i}", {"*": error}, seed=i).label_rows(rnd, samples):
            line["annotator"] = person
            lines.append(line)
    # some rows with the empty choice ("no clear pattern" on the annotator's buttons), by both
    state = [x for x in lines if x["field"] == "relation_cycle_state"]
    for x in state[:: 5]:
        x["value"] = json.dumps("")
    report = measures.round_agreement(pa.Table.from_pylist(lines, schema=schemas.LABELS), "relation", rnd)
    out = tmp_path_factory.mktemp("relation")
    reports.write_report(report, out)
    return report, out


def _field(report, name):
    return next(f for f in report.fields if f.field == name)


def test_evidence_rows_are_numbered_as_annotators_pick_them(relation_report):
    report, out = relation_report
    md = (out / "report.md").read_text()
    ev = _field(report, "relation_cycle_evidence_rows")
    assert ev.n_disagreeing, "the simulated annotators must disagree on some evidence rows"
    k = next(i for i, u in enumerate(ev.coded.units)
             if (u[0], u[1]) == (ev.disagreements[0]["sample_id"], ev.disagreements[0]["row_index"]))
    for a, c in enumerate(ev.coded.codes[k]):
        stored = sorted(ev.coded.domain[c])  # 0-based positions, as stored and released
        shown = "rows " + ", ".join(str(x + 1) for x in stored) if stored else "no rows"
        assert shown in md, (PEOPLE[a], shown)
    # every member in the one-vs-rest table is a printed row number: never row 0
    labels = md.split("## `relation_cycle_evidence_rows`")[1].split("### Labels (one vs rest)")[1]
    numbers = [int(m) for m in re.findall(r"^\| row (\d+) \|", labels, re.M)]
    assert numbers and min(numbers) >= 1
    assert sorted(numbers) == sorted(int(x["label"]) + 1 for x in ev.labels)


def test_labels_are_in_words(relation_report):
    report, out = relation_report
    md = (out / "report.md").read_text()
    html_text = (out / "report.html").read_text()
    state = _field(report, "relation_cycle_state")
    assert "" in state.coded.domain
    section = md.split("## `relation_cycle_state`")[1].split("## `relation_cycle_evidence_rows`")[0]
    assert '""' not in section and '""' not in html_text
    assert "| no clear pattern |" in section
    stored = [v for v in state.coded.domain if v]
    shown = {"pursue_withdraw": "Pursue / withdraw", "attack_attack": "Attack / attack",
             "withdraw_withdraw": "Withdraw / withdraw", "mixed_transition": "Mixed / in transition"}
    for value in stored:
        assert f"| {value} |" not in section, value  # no taxonomy identifier as a label
        if value in shown:
            assert shown[value] in section, value


def test_no_literal_backticks(relation_report):
    _, out = relation_report
    rendered = MarkdownIt("commonmark").enable(["table"]).render((out / "report.md").read_text())
    assert "`" not in _text_of(rendered)
    html_text = (out / "report.html").read_text()
    assert "`" not in html_text
    assert "<code>masi</code>" in html_text and "<code>rescue adjudicate push relation</code>" in html_text


def test_an_override_reason_keeps_its_backticks_as_text(tmp_path):
    text = reports._gate_html(False, reports._html_verdict(False, ["x 0.1 < 0.667"], {
        "by": "lead", "recorded_at": "now", "reason": "see `notes`"}, "relation"))
    assert "see &#96;notes&#96;" in text and "<code>notes</code>" not in text


def _edge_ink(png) -> list[str]:
    """The picture's edges (3 pixels deep) that hold ink: text or lines running off the picture."""
    img = mpimg.imread(png)[..., :3]
    dark = img.mean(axis=2) < 0.6
    edges = {"top": dark[:3], "bottom": dark[-3:], "left": dark[:, :3], "right": dark[:, -3:]}
    return [side for side, px in edges.items() if np.any(px)]


def test_plots_cut_no_title_or_name(relation_report):
    _, out = relation_report
    pngs = sorted(out.glob("*.png"))
    assert any(".confusion." in p.name for p in pngs)
    for png in pngs:
        assert not _edge_ink(png), (png.name, _edge_ink(png))
