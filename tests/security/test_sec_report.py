"""A hostile annotator writes Markdown and HTML into their answers, to forge the agreement
report the lead reads (a passed gate, a heading, a link, an image, raw HTML, a table row). On
the world's desks, the relation round is pushed to A and B; A answers through A's own login
with the hostile texts of tests/agreement/test_report_escape.py as the cycle's reasons, and a
label no control offers (a Markdown link) as its state; B answers plainly. After ``rescue
annotate pull`` and ``rescue agreement``, report.md rendered by a CommonMark renderer shows
each hostile text as its own text and nothing it tried to forge; report.html escapes them."""
from __future__ import annotations

import html
import json
import re

import pytest
from markdown_it import MarkdownIt
from attack_kit import A_EMAIL, B_EMAIL, fire
from typer.testing import CliRunner

from tests.agreement.test_report_escape import FORGED_LABEL, HOSTILE, _flat, _render
from pipeline.paths import DataRoot

pytestmark = pytest.mark.slow

ROUND = "relation"


def _results(rnd, task: dict, sample: dict, reasons: list[str] | None, state: str | None) -> list[dict]:
    """A's (hostile ``reasons``, forged ``state``) or B's (``reasons`` None: the draft's) answer."""
    from pipeline.annotation import ls_config, push
    values = push.input_values(rnd, sample)
    for n, (ri, v) in enumerate(sorted((ri, v) for ri, v in values.items() if v)):
        if reasons is not None:
            v["relation_cycle_reason"] = reasons[n % len(reasons)]
    results = ls_config.values_to_results(rnd, task["data"], values)
    if state is not None:  # a choice the label config does not offer: the editor cannot send it, the API can
        results += [{"from_name": r["from_name"].replace("relation_cycle_reason", "relation_cycle_state"),
                     "to_name": r["to_name"], "type": "choices", "value": {"choices": [state]}}
                    for r in results if r["from_name"].startswith("relation_cycle_reason")][:1]
    return results


@pytest.fixture(scope="module")
def report(world):
    from pipeline.annotation import push
    from pipeline.labelstudio.client import LabelStudioClient
    from pipeline.annotation.rounds import load_round
    from pipeline.cli import app
    from tests.annotation.ls_samples import make_sample

    rnd = load_round(ROUND)
    samples = [make_sample(f"synthetic/report_{i}", "couple", 9, seed=i) for i in (1, 2)]  # 3 therapist rows each
    by_id = {s["sample_id"]: s for s in samples}
    media = world.media[world.samples[0]["sample_id"]]
    push.push_round(world.desks, ROUND, samples, [A_EMAIL, B_EMAIL], root=DataRoot(world.root),
                    media_url=lambda s: f"/data/local-files/?d={media}")
    a = LabelStudioClient(world.url(A_EMAIL), world.a.token)
    headers = [*world.variants()["token"], ("Content-Type", "application/json")]
    reqs, n = [], 0
    for p in a.projects():
        if push.parse_project_key(p.key or "") != (ROUND, "couple", A_EMAIL):
            continue
        for task in a.tasks(p.id):
            reasons = HOSTILE[n:] + HOSTILE[:n]  # each hostile text on some unit
            n += 3
            body = {"result": _results(rnd, task, by_id[task["data"]["sample_id"]], reasons, FORGED_LABEL),
                    "lead_time": 5.0}
            reqs.append(("POST", f"/api/tasks/{task['id']}/annotations/", headers, json.dumps(body)))
    a.close()
    answers = fire(world.port(A_EMAIL), reqs)
    assert len(answers) == 2 and all(r.status == 201 for r in answers), [r.describe() for r in answers]
    b = LabelStudioClient(world.url(B_EMAIL), world.b.token)
    for p in b.projects():
        if push.parse_project_key(p.key or "") == (ROUND, "couple", B_EMAIL):
            for task in b.tasks(p.id):
                b.create_annotation(task["id"], _results(rnd, task, by_id[task["data"]["sample_id"]], None, None))
    b.close()

    runner, dr, env = CliRunner(), ["--data-root", str(world.root)], {"COLUMNS": "200"}
    pulled = runner.invoke(app, ["annotate", "pull", ROUND, *dr], env=env)
    assert pulled.exit_code == 0, pulled.output[-3000:]
    agreed = runner.invoke(app, ["agreement", ROUND, *dr], env=env)  # a gate may fail: the report is written
    out = DataRoot(world.root).agreement_report_dir(ROUND)
    assert (out / "report.md").is_file(), agreed.output[-3000:]
    world.pushed()  # B's desk has the round now
    return out


def test_hostile_answers_forge_nothing_in_the_report(report):
    from pipeline.quality import reports
    md = (report / "report.md").read_text()
    page = _render(md)
    text = _flat(" ".join(page.text))
    missing = [h for h in HOSTILE if _flat(h) not in text]
    assert not missing, f"not shown verbatim (did they reach the report?): {missing}"
    gates = [line for line in md.splitlines() if line.startswith(reports.GATE_MD)]
    assert len(gates) == 1, gates
    tags = [t for t, _ in page.tags]
    assert tags.count("h1") == 1, tags
    assert not [t for t in tags if t in ("a", "script", "del", "ol")], tags  # none of the report's own
    warnings = [line for line in md.splitlines() if line.startswith("> **Warning:**")]  # its own quotes
    assert tags.count("blockquote") == len(warnings), tags
    assert not [a for t, a in page.tags if t == "img" and "evil" in a.get("src", "")]
    strong = re.findall(r"<strong>(.*?)</strong>", MarkdownIt("commonmark").enable("table").render(md))
    assert strong.count("Gate:") == 1, strong
    assert not re.search(r"(?<!\\)<(!--|img)", md), "raw HTML in report.md"
    page_html = (report / "report.html").read_text()
    assert html.escape(HOSTILE[1]) in page_html and "<img src=x" not in page_html
