"""The agreement report of a round: Markdown + HTML with PNG plots, and a JSON summary.

Written by the agreement stage (:func:`pipeline.quality.agreement.measure_round`) to
``DataRoot.agreement_report_dir(round)`` (``annotation/labels/<round>.agreement/``): ``report.md``,
``report.html``, ``agreement.json`` (every figure), and plots - per field a label distribution
per annotator and a confusion matrix per annotator pair (categories), plus one chart of
per-annotator alpha. ``RoundAgreement.summary()`` is the small dict the release manifest and
the Prefect artifact carry.
"""
from __future__ import annotations

import html
import json
import os
from pathlib import Path

import numpy as np

from pipeline import store
from pipeline.quality.coding import confusion, label_text
from pipeline.quality.measures import FieldAgreement, RoundAgreement

os.environ.setdefault("MPLBACKEND", "Agg")
MAX_LABELS_PLOTTED = 25  # set-valued fields can have many distinct values: plot the most frequent


def _f(x) -> str:
    return "n/a" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x))


def _slug(name: str) -> str:
    return name.replace(".", "__")


def _plots(fa: FieldAgreement, out: Path) -> list[tuple[str, str]]:
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
    names = [label_text(coded.domain[i])[:28] for i in top]
    fig, ax = plt.subplots(figsize=(max(5, 0.45 * len(top) + 2), 3.6))
    width = 0.8 / max(1, len(coded.annotators))
    for a, ann in enumerate(coded.annotators):
        ax.bar(np.arange(len(top)) + a * width, counts[a, top], width, label=ann)
    ax.set_xticks(np.arange(len(top)) + 0.4 - width / 2, names, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("units")
    ax.set_title(f"{fa.round}: {fa.field} - labels per annotator", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    name = f"{_slug(fa.field)}.distribution.png"
    fig.savefig(out / name, dpi=72)
    plt.close(fig)
    made.append(("label distribution", name))
    if fa.metric in ("nominal", "presence"):  # categories: one confusion matrix per annotator pair
        for i in range(len(coded.annotators)):
            for j in range(i + 1, len(coded.annotators)):
                conf = confusion(coded, i, j)[np.ix_(top, top)]
                fig, ax = plt.subplots(figsize=(max(4, 0.35 * len(top) + 2.5), max(3.5, 0.35 * len(top) + 2)))
                ax.imshow(conf, cmap="Blues")
                for (r, c), v in np.ndenumerate(conf):
                    if v:
                        ax.text(c, r, str(v), ha="center", va="center", fontsize=6)
                ax.set_xticks(range(len(top)), names, rotation=60, ha="right", fontsize=6)
                ax.set_yticks(range(len(top)), names, fontsize=6)
                ax.set_xlabel(coded.annotators[j], fontsize=8)
                ax.set_ylabel(coded.annotators[i], fontsize=8)
                ax.set_title(f"{fa.field}: {coded.annotators[i]} vs {coded.annotators[j]}", fontsize=9)
                fig.tight_layout()
                name = f"{_slug(fa.field)}.confusion.{i}-{j}.png"
                fig.savefig(out / name, dpi=72)
                plt.close(fig)
                made.append((f"confusion {coded.annotators[i]} vs {coded.annotators[j]}", name))
    return made


def _annotator_plot(report: RoundAgreement, out: Path) -> str | None:
    import matplotlib.pyplot as plt

    anns = sorted({a["annotator"] for f in report.fields for a in f.annotators})
    if not anns or not report.fields:
        return None
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(report.fields) + 2), 3.6))
    width = 0.8 / len(anns)
    for k, ann in enumerate(anns):
        vals = [next((a["alpha_vs_others"] for a in f.annotators if a["annotator"] == ann), None) for f in report.fields]
        ax.bar(np.arange(len(report.fields)) + k * width, [np.nan if v is None else v for v in vals], width, label=ann)
    for i, f in enumerate(report.fields):
        ax.hlines(f.threshold, i - 0.1, i + 0.9, colors="red", linestyles="dashed", linewidth=1)
    ax.set_xticks(np.arange(len(report.fields)) + 0.4 - width / 2, [f.field for f in report.fields],
                  rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("mean pairwise alpha vs others")
    ax.set_title(f"{report.round}: per-annotator agreement (dashed: threshold)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    name = "annotators.alpha.png"
    fig.savefig(out / name, dpi=72)
    plt.close(fig)
    return name


def _table(headers: list[str], rows: list[list]) -> tuple[str, str]:
    md = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    md += ["| " + " | ".join(_f(c) for c in r) + " |" for r in rows]
    h = ["<table><tr>" + "".join(f"<th>{html.escape(x)}</th>" for x in headers) + "</tr>"]
    h += ["<tr>" + "".join(f"<td>{html.escape(_f(c))}</td>" for c in r) + "</tr>" for r in rows]
    h.append("</table>")
    return "\n".join(md), "\n".join(h)


def write_report(report: RoundAgreement, out_dir: str | Path) -> dict[str, Path]:
    """Write the report files; returns their paths by kind. Same figures -> same text files."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md: list[str] = [f"# Agreement report - round `{report.round}`", ""]
    hp: list[str] = [f"<!doctype html><html><head><meta charset='utf-8'><title>Agreement {html.escape(report.round)}"
                     "</title><style>body{font-family:sans-serif;max-width:1100px;margin:auto}"
                     "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 6px;"
                     "font-size:13px}.fail{color:#b00}.pass{color:#070}</style></head><body>",
                     f"<h1>Agreement report - round <code>{html.escape(report.round)}</code></h1>"]
    verdict = "PASSED" if report.passed else "BELOW THRESHOLD (blocks the release unless overridden)"
    md += [f"**Gate:** {verdict}", ""]
    hp.append(f"<p><b>Gate:</b> <span class='{'pass' if report.passed else 'fail'}'>{html.escape(verdict)}</span></p>")
    headers = ["field", "metric", "alpha", "threshold", "passed", "units", "pairable", "annotators",
               "% agreement", "unanimous", "Fleiss kappa"]
    rows = [[f.field, f.metric, f.alpha, f.threshold, {True: "yes", False: "NO", None: "undefined"}[f.passed],
             f.n_units, f.n_pairable, f.n_annotators, f.percent_agreement, f.unanimous, f.fleiss_kappa]
            for f in report.fields]
    t_md, t_h = _table(headers, rows)
    md += ["## Fields", "", t_md, ""]
    hp += ["<h2>Fields</h2>", t_h]
    ann_plot = _annotator_plot(report, out)
    if ann_plot:
        md += [f"![per-annotator alpha]({ann_plot})", ""]
        hp.append(f"<img src='{ann_plot}' alt='per-annotator alpha'>")
    plots = {}
    for f in report.fields:
        md += [f"## `{f.field}` ({f.metric})", ""]
        hp.append(f"<h2><code>{html.escape(f.field)}</code> ({html.escape(f.metric)})</h2>")
        parts = [("Annotator pairs", ["a", "b", "units", "% agreement", "alpha", "Cohen kappa"],
                  [[p["a"], p["b"], p["n_units"], p["percent_agreement"], p["alpha"], p["cohen_kappa"]] for p in f.pairs]),
                 ("Annotators (against the others)", ["annotator", "units", "coverage", "alpha vs others",
                                                      "kappa vs others", "alpha without them"],
                  [[a["annotator"], a["n_units"], a["coverage"], a["alpha_vs_others"], a["kappa_vs_others"],
                    a["alpha_without"]] for a in f.annotators]),
                 ("Scenarios", ["scenario", "units", "alpha"],
                  [[s["scenario"], s["n_units"], s["alpha"]] for s in f.scenarios]),
                 ("Labels (one vs rest)", ["label", "count", "alpha"],
                  [[x["label"], x["n"], x["alpha"]] for x in f.labels])]
        for title, headers, rows in parts:
            if not rows:
                continue
            t_md, t_h = _table(headers, rows)
            md += [f"### {title}", "", t_md, ""]
            hp += [f"<h3>{html.escape(title)}</h3>", t_h]
        for caption, name in _plots(f, out):
            plots[name] = out / name
            md += [f"![{caption}]({name})", ""]
            hp.append(f"<figure><img src='{name}' alt='{html.escape(caption)}'><figcaption>"
                      f"{html.escape(caption)}</figcaption></figure>")
    if report.issues:
        md += ["## Data issues", ""]
        hp.append("<h2>Data issues</h2><ul>")
        for i in report.issues[:200]:
            where = "/".join(str(x) for x in (i.get("sample_id"), i.get("row_index"), i.get("field")) if x is not None)
            md.append(f"- **{i['kind']}** {where}: {i['message']}")
            hp.append(f"<li><b>{html.escape(i['kind'])}</b> {html.escape(where)}: {html.escape(i['message'])}</li>")
        if len(report.issues) > 200:
            md.append(f"- ... and {len(report.issues) - 200} more (agreement.json)")
        hp.append("</ul>")
    hp.append("</body></html>")
    paths = {
        "markdown": store.atomic_write_text(out / "report.md", "\n".join(md) + "\n"),
        "html": store.atomic_write_text(out / "report.html", "\n".join(hp) + "\n"),
        "json": store.atomic_write_text(out / "agreement.json", json.dumps(report.to_dict(), indent=1,
                                                                           ensure_ascii=False, default=str) + "\n"),
    }
    if ann_plot:
        paths["annotators_plot"] = out / ann_plot
    paths.update(plots)
    return paths
