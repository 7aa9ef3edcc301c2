"""The agreement report of a round: Markdown + HTML with PNG plots, and a JSON summary.

Written by the agreement stage (:func:`pipeline.quality.agreement.measure_round`) to
``DataRoot.agreement_report_dir(round)`` (``annotation/labels/<round>.agreement/``): ``report.md``,
``report.html``, ``agreement.json`` (every figure), and plots - per field a label distribution
per annotator and a confusion matrix per annotator pair (categories), plus one chart of
per-annotator alpha. ``RoundAgreement.summary()`` is the small dict the release manifest and
the Prefect artifact carry.

What a maintainer needs to act: the gate verdict says whether the round blocks a release or was
let through by an override (who, when, why - :func:`mark_override` rewrites the verdict when an
override is recorded after the report was written); a "how to read" section names the
interpretation bands and their source and what each metric means; each field has its bootstrap
95% interval, a one-line reading, warnings (too few units), the disagreeing rows with every
annotator's value and where their adjudication task is; free-text fields have their own measure.
Plots use large type (readable on a laptop screen without zooming).

Whatever annotators wrote (values, labels, the messages about them) and what operators typed (an
override's reason) is inert in both files: escaped as HTML in ``report.html`` and as Markdown in
``report.md`` (:func:`pipeline.markdown.escape`: no forged heading, gate line, link or table cell).
"""
from __future__ import annotations

import html
import json
import os
import re
import textwrap
from pathlib import Path

import numpy as np

from pipeline import store
from pipeline.annotation import acceptance as acc
from pipeline.markdown import escape as md_text
from pipeline.quality.adjudication import project_key, project_title
from pipeline.quality.coding import confusion, field_of, label_text
from pipeline.quality.measures import (BANDS_SOURCE, METRIC_MEANING, MIN_UNITS, TEXT_MEANING, FieldAgreement,
                                       RoundAgreement)
from pipeline.quality.measures import band

os.environ.setdefault("MPLBACKEND", "Agg")
MAX_LABELS_PLOTTED = 25  # set-valued fields can have many distinct values: plot the most frequent
MAX_ROWS_SHOWN = 50  # disagreeing rows per field in report.md / .html (all kept ones are in agreement.json)
# Type sizes and resolution of the plots (points / dots per inch).
FONT, SMALL, TITLE, DPI = 12, 11, 14, 110
GATE_MD = "**Gate:**"  # the verdict line's prefix in report.md (mark_override rewrites that line)


def verdict(passed: bool, failing: list[str], override: dict | None, round_name: str, esc=str) -> str:
    """The gate line: passed; below threshold and released under an override; or blocking.
    ``esc``: what the override's words (who, when, why) go through (:func:`md_text` for report.md)."""
    if passed:
        return "PASSED: every measured field reaches its threshold."
    below = ", ".join(failing) or "some fields"
    if override:
        return (f"BELOW THRESHOLD ({below}) - released under an override recorded by {esc(override.get('by'))} "
                f"on {esc(override.get('recorded_at', '?'))}: \"{esc(override.get('reason'))}\". The release manifest and "
                "dataset card carry this override.")
    return (f"BELOW THRESHOLD ({below}): this round blocks a release until it is adjudicated and measured again, "
            f"or an override with a reason is recorded (`rescue agreement {round_name} --override REASON --by NAME`).")


def _failing(report: RoundAgreement) -> list[str]:
    return [f"{f.field} {_f(f.alpha)} < {f.threshold:.3f}" for f in report.failing()]


def _f(x) -> str:
    return "n/a" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x))


def _slug(name: str) -> str:
    return name.replace(".", "__")


def _round(name: str):
    """The round's definition (its fields' words), or None for a round not defined here."""
    from pipeline.annotation.rounds import load_round

    try:
        return load_round(name)
    except (KeyError, ValueError, OSError):
        return None


def _words(fa: FieldAgreement, rnd) -> list[str]:
    """Each domain value of a field in the words annotators see (:func:`label_text`)."""
    return [label_text(v, rnd, fa.field) for v in fa.coded.domain] if fa.coded is not None else []


def _label_rows(fa: FieldAgreement, rnd) -> list[list]:
    """The one-vs-rest table's rows, each label in words (``fa.labels`` holds the stored values in
    the order :func:`pipeline.quality.measures.per_label` made them: the domain's, or set members)."""
    if fa.coded is None or len(fa.labels) == 0:
        return [[x["label"], x["n"], x["alpha"]] for x in fa.labels]
    if fa.metric == "nominal":
        names = _words(fa, rnd)
    else:  # masi: the members of the sets, in per_label's order
        items = sorted({x for s in fa.coded.domain for x in s}, key=str)
        f = field_of(rnd, fa.field)
        names = [label_text(x, rnd, fa.field) if f is None or f.type != "rows" else f"row {label_text(x, rnd, fa.field)}"
                 for x in items]
    if len(names) != len(fa.labels):
        names = [x["label"] for x in fa.labels]
    return [[name, x["n"], x["alpha"]] for name, x in zip(names, fa.labels)]


def _wrapped(text: str, width: int) -> str:
    """A plot's label on as many lines as it needs, never cut (a word longer than a line keeps it)."""
    return textwrap.fill(text, width, break_long_words=False, break_on_hyphens=False) or text


def _plots(fa: FieldAgreement, out: Path, rnd=None) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    coded = fa.coded
    if coded is None or not coded.domain:
        return []
    made = []
    counts = np.stack([np.bincount(coded.codes[:, a][coded.codes[:, a] >= 0], minlength=len(coded.domain))
                       for a in range(len(coded.annotators))]) if coded.annotators else np.zeros((0, 0))
    top = np.argsort(-counts.sum(axis=0), kind="stable")[:MAX_LABELS_PLOTTED]
    words = _words(fa, rnd)
    names = [_wrapped(words[i], 24) for i in top]
    fig, ax = plt.subplots(figsize=(max(8, 0.6 * len(top) + 3), 5.5))
    width = 0.8 / max(1, len(coded.annotators))
    for a, ann in enumerate(coded.annotators):
        ax.bar(np.arange(len(top)) + a * width, counts[a, top], width, label=ann)
    ax.set_xticks(np.arange(len(top)) + 0.4 - width / 2, names, rotation=50, ha="right", fontsize=SMALL)
    ax.tick_params(axis="y", labelsize=SMALL)
    ax.set_ylabel("units", fontsize=FONT)
    ax.set_title(f"{fa.round}: {fa.field} - labels per annotator", fontsize=TITLE)
    ax.legend(fontsize=SMALL)
    fig.tight_layout()
    name = f"{_slug(fa.field)}.distribution.png"
    fig.savefig(out / name, dpi=DPI)
    plt.close(fig)
    made.append(("label distribution", name))
    if fa.metric in ("nominal", "presence"):  # categories: one confusion matrix per annotator pair
        for i in range(len(coded.annotators)):
            for j in range(i + 1, len(coded.annotators)):
                conf = confusion(coded, i, j)[np.ix_(top, top)]
                side = max(6.5, 0.55 * len(top) + 3.5)
                fig, ax = plt.subplots(figsize=(side, side))
                ax.imshow(conf, cmap="Blues")
                peak = conf.max() or 1
                for (r, c), v in np.ndenumerate(conf):
                    if v:
                        ax.text(c, r, str(v), ha="center", va="center", fontsize=SMALL,
                                color="white" if v > peak / 2 else "black")
                ax.set_xticks(range(len(top)), names, rotation=50, ha="right", fontsize=SMALL)
                ax.set_yticks(range(len(top)), names, fontsize=SMALL)
                ax.set_xlabel(coded.annotators[j], fontsize=FONT)
                ax.set_ylabel(coded.annotators[i], fontsize=FONT)
                # on lines of its own: a field and two e-mails are wider than the plot
                ax.set_title(f"{fa.field}\n{coded.annotators[i]}\nvs {coded.annotators[j]}", fontsize=TITLE)
                fig.tight_layout()
                name = f"{_slug(fa.field)}.confusion.{i}-{j}.png"
                fig.savefig(out / name, dpi=DPI)
                plt.close(fig)
                made.append((f"confusion {coded.annotators[i]} vs {coded.annotators[j]}", name))
    return made


def _annotator_plot(report: RoundAgreement, out: Path) -> str | None:
    import matplotlib.pyplot as plt

    anns = sorted({a["annotator"] for f in report.fields for a in f.annotators})
    if not anns or not report.fields:
        return None
    fig, ax = plt.subplots(figsize=(max(8, 1.5 * len(report.fields) + 3), 5.5))
    width = 0.8 / len(anns)
    for k, ann in enumerate(anns):
        vals = [next((a["alpha_vs_others"] for a in f.annotators if a["annotator"] == ann), None) for f in report.fields]
        ax.bar(np.arange(len(report.fields)) + k * width, [np.nan if v is None else v for v in vals], width, label=ann)
    for i, f in enumerate(report.fields):
        ax.hlines(f.threshold, i - 0.1, i + 0.9, colors="red", linestyles="dashed", linewidth=1)
    ax.set_xticks(np.arange(len(report.fields)) + 0.4 - width / 2, [f.field for f in report.fields],
                  rotation=30, ha="right", fontsize=SMALL)
    ax.tick_params(axis="y", labelsize=SMALL)
    ax.set_ylabel("mean pairwise alpha vs others", fontsize=FONT)
    ax.set_title(f"{report.round}: per-annotator agreement (dashed: threshold)", fontsize=TITLE)
    ax.legend(fontsize=SMALL)
    fig.tight_layout()
    name = "annotators.alpha.png"
    fig.savefig(out / name, dpi=DPI)
    plt.close(fig)
    return name


def _table(headers: list[str], rows: list[list]) -> tuple[str, str]:
    md = ["| " + " | ".join(md_text(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    md += ["| " + " | ".join(md_text(_f(c)) for c in r) + " |" for r in rows]
    h = ["<table><tr>" + "".join(f"<th>{html.escape(x)}</th>" for x in headers) + "</tr>"]
    h += ["<tr>" + "".join(f"<td>{html.escape(_f(c))}</td>" for c in r) + "</tr>" for r in rows]
    h.append("</table>")
    return "\n".join(md), "\n".join(h)


def write_report(report: RoundAgreement, out_dir: str | Path, override: dict | None = None,
                 acceptance: list[dict] | None = None) -> dict[str, Path]:
    """Write the report files; returns their paths by kind. Same figures -> same text files.
    ``override``: the valid override of this round's labels, if one is recorded. ``acceptance``:
    the round's pre-annotation acceptance lines (:func:`pipeline.annotation.acceptance.read`;
    None leaves the section out)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rnd = _round(report.round)
    md: list[str] = [f"# Agreement report - round `{report.round}`", ""]
    hp: list[str] = [f"<!doctype html><html><head><meta charset='utf-8'><title>Agreement {html.escape(report.round)}"
                     "</title><style>body{font-family:sans-serif;max-width:1100px;margin:auto}"
                     "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 6px;"
                     "font-size:13px}.fail{color:#b00}.pass{color:#070}</style></head><body>",
                     f"<h1>Agreement report - round <code>{html.escape(report.round)}</code></h1>"]
    text = _html_verdict(report.passed, _failing(report), override, report.round)
    md += [f"{GATE_MD} {_md_verdict(report.passed, _failing(report), override, report.round)}", ""]
    hp.append(_gate_html(report.passed, text))
    metrics = sorted({f.metric for f in report.fields})
    how = [f"Alpha is read in the bands of {BANDS_SOURCE}.",
           "The 95% interval comes from resampling units with replacement (500 resamples, seeded: the same "
           "labels give the same interval); a wide interval means more units are needed.",
           f"A field with fewer than {MIN_UNITS} pairable units (rows labelled by two or more annotators) is flagged.",
           *[f"`{m}`: {METRIC_MEANING[m]}." for m in metrics if m in METRIC_MEANING],
           "Disagreeing rows are listed per field with each annotator's value; the adjudicator sees them in "
           "Label Studio (project named below) and decides."]
    md += ["## How to read this report", "", *[f"- {h}" for h in how], ""]
    hp += ["<h2>How to read this report</h2><ul>", *[f"<li>{_code_html(h)}</li>" for h in how], "</ul>"]
    headers = ["field", "metric", "alpha", "95% CI", "threshold", "passed", "reading", "units", "pairable",
               "annotators", "disagreeing", "% agreement", "unanimous", "Fleiss kappa"]
    rows = [[f.field, f.metric, f.alpha, _ci(f), f.threshold, {True: "yes", False: "NO", None: "undefined"}[f.passed],
             _band(f), f.n_units, f.n_pairable, f.n_annotators, f.n_disagreeing, f.percent_agreement, f.unanimous,
             f.fleiss_kappa]
            for f in report.fields]
    t_md, t_h = _table(headers, rows)
    md += ["## Fields", "", t_md, ""]
    hp += ["<h2>Fields</h2>", t_h]
    ann_plot = _annotator_plot(report, out)
    if ann_plot:
        md += [f"![per-annotator alpha]({ann_plot})", ""]
        hp.append(f"<img src='{ann_plot}' alt='per-annotator alpha'>")
    a_md, a_h = _acceptance(acceptance)
    md += a_md
    hp += a_h
    plots = {}
    for f in report.fields:
        md += [f"## `{f.field}` ({f.metric})", "", f"**Reading:** {md_text(f.reading)}", ""]
        hp.append(f"<h2><code>{html.escape(f.field)}</code> ({html.escape(f.metric)})</h2>")
        hp.append(f"<p><b>Reading:</b> {html.escape(f.reading)}</p>")
        for w in f.warnings:
            md += [f"> **Warning:** {md_text(w)}", ""]
            hp.append(f"<p class='fail'><b>Warning:</b> {html.escape(w)}</p>")
        d_md, d_h = _disagreements(report.round, f, rnd)
        md += d_md
        hp += d_h
        parts = [("Annotator pairs", ["a", "b", "units", "% agreement", "alpha", "Cohen kappa"],
                  [[p["a"], p["b"], p["n_units"], p["percent_agreement"], p["alpha"], p["cohen_kappa"]] for p in f.pairs]),
                 ("Annotators (against the others)", ["annotator", "units", "coverage", "alpha vs others",
                                                      "kappa vs others", "alpha without them"],
                  [[a["annotator"], a["n_units"], a["coverage"], a["alpha_vs_others"], a["kappa_vs_others"],
                    a["alpha_without"]] for a in f.annotators]),
                 ("Scenarios", ["scenario", "units", "alpha"],
                  [[s["scenario"], s["n_units"], s["alpha"]] for s in f.scenarios]),
                 ("Labels (one vs rest)", ["label", "count", "alpha"],
                  _label_rows(f, rnd))]
        for title, headers, rows in parts:
            if not rows:
                continue
            t_md, t_h = _table(headers, rows)
            md += [f"### {title}", "", t_md, ""]
            hp += [f"<h3>{html.escape(title)}</h3>", t_h]
        for caption, name in _plots(f, out, rnd):
            plots[name] = out / name
            md += [f"![{md_text(caption)}]({name})", ""]
            hp.append(f"<figure><img src='{name}' alt='{html.escape(caption)}'><figcaption>"
                      f"{html.escape(caption)}</figcaption></figure>")
    t_md, t_h = _text_fields(report)
    md += t_md
    hp += t_h
    if report.issues:
        md += ["## Data issues", ""]
        hp.append("<h2>Data issues</h2><ul>")
        for i in report.issues[:200]:
            where = "/".join(str(x) for x in (i.get("sample_id"), i.get("row_index"), i.get("field")) if x is not None)
            md.append(f"- **{md_text(i['kind'])}** {md_text(where)}: {md_text(i['message'])}")
            hp.append(f"<li><b>{html.escape(i['kind'])}</b> {html.escape(where)}: {html.escape(i['message'])}</li>")
        if len(report.issues) > 200:
            md.append(f"- ... and {len(report.issues) - 200} more (agreement.json)")
        hp.append("</ul>")
    hp.append("</body></html>")
    paths = {
        "markdown": store.atomic_write_text(out / "report.md", "\n".join(md) + "\n"),
        "html": store.atomic_write_text(out / "report.html", "\n".join(hp) + "\n"),
        "json": store.atomic_write_text(out / "agreement.json", json.dumps(
            {**report.to_dict(), "override": override if not report.passed else None,
             **({"acceptance": acc.summarize(acceptance, by_annotator=True)} if acceptance is not None else {})},
            indent=1,
            ensure_ascii=False, default=str) + "\n"),
    }
    if ann_plot:
        paths["annotators_plot"] = out / ann_plot
    paths.update(plots)
    return paths


ACCEPTANCE_HOW = ("What annotators did with the pre-filled values (the prediction a round was pushed with), "
                  "per field: kept it, changed it, cleared it, or added a value where none was predicted. "
                  "Source is the prediction's model version (<round>-v<version>-<source>: `input` = the "
                  "segmenter's draft or earlier gold, `model-...` = a model). Records count as a whole and "
                  "part by part (`<field>.<subfield>`, slot by slot); `voice_name` is the transcript round's "
                  "name of each voice. A high kept share with low "
                  "agreement, or one annotator keeping far more than the others, means the drafts anchor "
                  "people; many changes mean the drafts cost more than they save.")


def _share(x) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def _acceptance(lines: list[dict] | None) -> tuple[list[str], list[str]]:
    """The pre-annotation acceptance section: per source and field, then per annotator."""
    if lines is None:
        return [], []
    md = ["## Pre-annotation acceptance", "", ACCEPTANCE_HOW, ""]
    hp = ["<h2>Pre-annotation acceptance</h2>", f"<p>{_code_html(ACCEPTANCE_HOW)}</p>"]
    if not lines:
        text = "No submitted task of this round carried a prediction."
        return md + [text, ""], hp + [f"<p>{text}</p>"]
    counts = ["predicted", "kept", "changed", "cleared", "added", "kept %"]
    for title, rows, lead in (
            ("All annotators", acc.summarize(lines), ["source", "field"]),
            ("Per annotator", acc.summarize(lines, by_annotator=True), ["source", "annotator", "field"])):
        t_md, t_h = _table(lead + counts, [[r[k] for k in lead] + [r["predicted"], r["kept"], r["changed"],
                                                                   r["cleared"], r["added"], _share(r["kept_share"])]
                                           for r in rows])
        md += [f"### {title}", "", t_md, ""]
        hp += [f"<h3>{title}</h3>", t_h]
    return md, hp


def _ci(f: FieldAgreement) -> str:
    return "n/a" if f.ci_low is None else f"{f.ci_low:.3f}-{f.ci_high:.3f}"


def _band(f: FieldAgreement) -> str:

    return band(f.alpha) or "undefined"


def _md_verdict(passed: bool, failing: list[str], override: dict | None, round_name: str) -> str:
    return verdict(passed, failing, override if not passed else None, round_name, esc=md_text)


_CODE = re.compile(r"`([^`]+)`")
_TICK = "\x00"  # a backtick someone else wrote, kept apart from our code spans until the end


def _code_html(text: str) -> str:
    """Our own text as HTML: escaped, its `code` spans as <code> (no literal backticks). Text that
    someone else wrote reaches it with its backticks as :data:`_TICK`: shown as backticks."""
    return _CODE.sub(r"<code>\1</code>", html.escape(text)).replace(_TICK, "&#96;")


def _html_verdict(passed: bool, failing: list[str], override: dict | None, round_name: str) -> str:
    return verdict(passed, failing, override if not passed else None, round_name,
                   esc=lambda s: str(s).replace("`", _TICK))


def _gate_html(passed: bool, text: str) -> str:
    """``text``: :func:`_html_verdict`'s."""
    return f"<p id='gate'><b>Gate:</b> <span class='{'pass' if passed else 'fail'}'>{_code_html(text)}</span></p>"


def _disagreement_values(f: FieldAgreement, rnd) -> list[dict[str, str]]:
    """Each listed disagreement's values by annotator, in words (from the coded matrix; the
    stored text of ``agreement.json`` where a unit is not in it)."""
    if f.coded is None:
        return [d["values"] for d in f.disagreements]
    words = _words(f, rnd)
    index = {tuple(u) if len(u) > 2 else (*u, ""): k for k, u in enumerate(f.coded.units)}
    out = []
    for d in f.disagreements[:MAX_ROWS_SHOWN]:
        k = index.get((d["sample_id"], d["row_index"], d["part"] or ""))
        if k is None:
            out.append(d["values"])
            continue
        codes = f.coded.codes[k]
        out.append({f.coded.annotators[a]: words[c] for a, c in enumerate(codes) if c >= 0})
    return out


def _disagreements(round_name: str, f: FieldAgreement, rnd=None) -> tuple[list[str], list[str]]:
    """The disagreeing rows of a field (values in words) and where the adjudicator finds them."""
    if not f.n_disagreeing:
        return [], []
    scen = sorted({d["scenario"] for d in f.disagreements})
    where = "; ".join(f"Label Studio project \"{project_title(round_name, s)}\" (key `{project_key(round_name, s)}`)"
                      for s in scen)
    intro = (f"{f.n_disagreeing} units where annotators disagree (first {min(MAX_ROWS_SHOWN, f.n_disagreeing)} "
             f"below; agreement.json keeps up to {len(f.disagreements)}). Adjudication: one task per sample in {where} "
             "(`rescue adjudicate push " + round_name + "`).")
    anns = sorted({a for d in f.disagreements for a in d["values"]})
    values = _disagreement_values(f, rnd)
    rows = [[d["sample_id"], d["row_index"], d["part"] or "", *[v.get(a, "-") for a in anns]]
            for d, v in zip(f.disagreements[:MAX_ROWS_SHOWN], values)]
    t_md, t_h = _table(["sample", "row", "record", *anns], rows)
    return (["### Disagreeing rows", "", intro, "", t_md, ""],
            ["<h3>Disagreeing rows</h3>", f"<p>{_code_html(intro)}</p>", t_h])


def _text_fields(report: RoundAgreement) -> tuple[list[str], list[str]]:
    if not report.text_fields:
        return [], []
    md = ["## Free-text fields", "", "No alpha for free text; these measures show how alike the annotators' texts "
          "are. They are reported, never a gate.", ""]
    hp = ["<h2>Free-text fields</h2>", "<p>No alpha for free text; these measures show how alike the annotators' "
          "texts are. They are reported, never a gate.</p>"]
    for t in report.text_fields:
        md += [f"### `{t.field}` ({t.measure})", "", f"- Measure: {TEXT_MEANING[t.measure]}.",
               f"- Value: {_f(t.value)} over {t.n_units} units; {t.n_differing} units differ.",
               f"- Reading: {md_text(t.reading)}", ""]
        hp += [f"<h3><code>{html.escape(t.field)}</code> ({html.escape(t.measure)})</h3><ul>",
               f"<li>Measure: {html.escape(TEXT_MEANING[t.measure])}.</li>",
               f"<li>Value: {html.escape(_f(t.value))} over {t.n_units} units; {t.n_differing} units differ.</li>",
               f"<li>Reading: {html.escape(t.reading)}</li></ul>"]
        if t.pairs:
            t_md, t_h = _table(["a", "b", "units", t.measure], [[p["a"], p["b"], p["n_units"], p["value"]] for p in t.pairs])
            md += [t_md, ""]
            hp.append(t_h)
        if t.examples:
            anns = sorted({a for e in t.examples for a in e["values"]})
            t_md, t_h = _table(["sample", "row", *anns], [[e["sample_id"], e["row_index"],
                                                           *[e["values"].get(a, "-") for a in anns]]
                                                          for e in t.examples[:MAX_ROWS_SHOWN]])
            md += ["Differing rows:", "", t_md, ""]
            hp += ["<p>Differing rows:</p>", t_h]
    return md, hp


def mark_override(out_dir: str | Path, round_name: str, passed: bool, failing: list[str], override: dict | None) -> bool:
    """Rewrite the gate verdict of an existing report (report.md, report.html, agreement.json) for
    an override recorded after it was written. Returns whether a report was there to update."""
    out = Path(out_dir)
    md_path, html_path, json_path = out / "report.md", out / "report.html", out / "agreement.json"
    if not md_path.is_file():
        return False
    text = _html_verdict(passed, failing, override, round_name)
    lines = md_path.read_text(encoding="utf-8").split("\n")
    gate = f"{GATE_MD} {_md_verdict(passed, failing, override, round_name)}"
    lines = [gate if line.startswith(GATE_MD) else line for line in lines]
    store.atomic_write_text(md_path, "\n".join(lines))
    if html_path.is_file():
        page = html_path.read_text(encoding="utf-8")
        start = page.find("<p id='gate'>")
        if start >= 0:
            end = page.index("</p>", start) + len("</p>")
            page = page[:start] + _gate_html(passed, text) + page[end:]
            store.atomic_write_text(html_path, page)
    if json_path.is_file():
        data = json.loads(json_path.read_text(encoding="utf-8"))
        data["override"] = override if not passed else None
        store.atomic_write_text(json_path, json.dumps(data, indent=1, ensure_ascii=False, default=str) + "\n")
    return True
