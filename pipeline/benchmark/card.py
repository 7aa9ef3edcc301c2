"""The release's dataset card (``README.md``): the Hugging Face card a dataset user expects.

Everything in it comes from the manifest (so the card can be rebuilt from a release and never
disagrees with it) plus :class:`CardOptions` (license and citation, which the maintainer sets):

* YAML front matter (``huggingface_hub.DatasetCardData``): pretty name, license (``other`` with
  ``license_name`` / ``license_link`` by default), language, task and size categories,
  annotation creators, ``configs`` (data files per split) and ``dataset_info`` (features of
  every config from the Parquet schemas, ``class_label`` names for every categorical label
  column, split sizes).
* A banner when any sample is synthetic or any annotator simulated (the manifest's ``synthetic``:
  :func:`pipeline.benchmark.provenance.synthetic_markers`).
* How the data was built (pipeline version, source, annotation rounds, annotators per round,
  adjudication, pre-annotation), agreement per round and field with every override and its
  reason, label distributions of all six tasks, the paper-shaped files, sensitive data,
  consent, intended and out-of-scope use, limitations, and citations (the paper's BibTeX is a
  clearly marked placeholder until the maintainer fills it in, since the spec gives no entry;
  one entry for the release itself).
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa
import yaml

from pipeline import schemas, store, taxonomy
from pipeline.benchmark import tasks
from pipeline.benchmark.provenance import consent_text, sensitive_text, source_text


# libyaml's safe dumper: the same text as PyYAML's pure-Python one at a fifth of the CPU (it
# differs only in writing U+0085 as "\N", which the pure-Python one does not read back).
_YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

DEFAULT_LICENSE_NAME = "rescue-release-terms"
DEFAULT_LICENSE_TEXT = ("The terms of use of this release are the maintainer's to set (see `license_name` / "
                        "`license_link`; until then no licence is granted). Whatever they are, the terms of the "
                        "source videos apply to everything derived from them: transcripts, annotations and task "
                        "instances. The RESCUE authors announced a research-only licence for their release.")
PAPER_BIBTEX_PLACEHOLDER = """@misc{hu2026rescuebench,
  title         = {{RESCUE-BENCH}: Towards Relation-Aware Multi-Party Emotional Support Conversation Systems},
  author        = {Hu and others},  % PLACEHOLDER - maintainer: replace with the full author list from the paper
  year          = {2026},
  eprint        = {2609.09657},
  archivePrefix = {arXiv},
  note          = {PLACEHOLDER entry built from the title, first author and arXiv id; check it against the paper}
}"""


@dataclass(frozen=True)
class CardOptions:
    """What the maintainer decides: the licence and the paper's citation (``rescue release build
    --license ... --license-name ... --license-link ... --citation FILE``)."""

    license: str = "other"
    license_name: str = DEFAULT_LICENSE_NAME
    license_link: str = ""
    license_text: str = DEFAULT_LICENSE_TEXT
    paper_bibtex: str = PAPER_BIBTEX_PLACEHOLDER

    def to_manifest(self) -> dict:
        return asdict(self)


# --- YAML front matter ------------------------------------------------------------------

def class_labels() -> dict[str, dict[str, list[str]]]:
    """config -> label column -> class names (sorted), for every categorical gold column."""
    rel = sorted({x for s in taxonomy.SCENARIOS for x in taxonomy.relation_patterns(s)})
    strat = sorted({x for s in taxonomy.SCENARIOS for x in taxonomy.support_strategies(s)})
    return {
        "itp": {"label": ["no", "yes"],
                "label_boundary_type": ["non_therapist_exchange", "same_speaker_continuation", "therapist_entry"]},
        "rpp": {"label": rel},
        "stp": {"label_source": ["row_target_fallback", "support_strategy"]},
        "ssp": {"label": strat},
    }


def _feature(t: pa.DataType) -> dict:
    if pa.types.is_struct(t):
        return {"struct": [{"name": f.name, **_feature(f.type)} for f in t]}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = _feature(t.value_type)
        return {"list": inner["dtype"] if set(inner) == {"dtype"} and isinstance(inner["dtype"], str)
                else inner.get("struct", inner)}
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return {"dtype": "string"}
    return {"dtype": {"double": "float64", "float": "float32", "halffloat": "float16"}.get(str(t), str(t))}


def features(config: str) -> list[dict]:
    """A config's features in the card's ``dataset_info`` form (the ``datasets`` YAML layout)."""
    schema = {"samples": schemas.SAMPLES, "rows": schemas.ROWS, **schemas.TASK_SCHEMAS}[config]
    labels = class_labels().get(config, {})
    out = []
    for f in schema:
        if f.name in labels:
            out.append({"name": f.name, "dtype": {"class_label": {"names": {str(i): n for i, n in
                                                                           enumerate(labels[f.name])}}}})
        else:
            out.append({"name": f.name, **_feature(f.type)})
    return out


def size_category(n: int) -> str:
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return name
    return "1M<n<10M"


def front_matter(manifest: dict) -> dict:
    card = manifest["card"]
    synthetic = bool(manifest.get("synthetic"))
    by_config: dict[str, list[tuple[str, str, dict]]] = {}
    for rel, info in sorted(manifest["files"].items()):
        parts = rel.split("/")
        if parts[0] == "data" and len(parts) == 3:
            by_config.setdefault(parts[1], []).append((parts[2].removesuffix(".parquet"), rel, info))
    configs, info = [], []
    for config in schemas.RELEASE_CONFIGS:
        if config not in by_config:
            continue
        configs.append({"config_name": config,
                        "data_files": [{"split": split, "path": rel} for split, rel, _ in by_config[config]]})
        info.append({"config_name": config, "features": features(config),
                     "splits": [{"name": split, "num_bytes": i["bytes"], "num_examples": i["rows"]}
                                for split, _, i in by_config[config]]})
    largest = max((i["rows"] for rel, i in manifest["files"].items() if rel.startswith("data/")), default=0)
    meta: dict[str, Any] = {
        "pretty_name": "RESCUE (synthetic demo)" if synthetic else "RESCUE",
        "license": card["license"],
    }
    if card["license"] == "other":
        meta["license_name"] = card["license_name"]
        if card["license_link"]:
            meta["license_link"] = card["license_link"]
    meta.update({
        "language": ["en"],
        "multilinguality": ["monolingual"],
        "task_categories": ["text-classification", "text-generation"],
        "task_ids": ["multi-class-classification", "sentiment-classification", "dialogue-modeling"],
        "size_categories": [size_category(largest)],
        # experts only where the source says so (the paper's PhD-level annotators); else what is known
        "annotations_creators": ["machine-generated"] if synthetic else
        ["expert-generated"] if manifest["source"].get("kind") == "rescue_jsonl" else ["other"],
        "language_creators": ["machine-generated"] if synthetic else ["found"],
        "source_datasets": ["original"],
        "tags": ["emotional-support", "therapy", "multi-party-dialogue", "relation-aware", "benchmark"]
        + (["synthetic"] if synthetic else []),
        "configs": configs,
        "dataset_info": info,
    })
    return meta


# --- body -------------------------------------------------------------------------------

def _md_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _fmt(x) -> str:
    return "n/a" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x))


def _dist_text(d: dict) -> str:
    total = sum(d.values()) or 1
    return ", ".join(f"`{k}` {v} ({100 * v / total:.1f}%)"
                     for k, v in sorted(d.items(), key=lambda kv: (-kv[1], kv[0])))


DESCRIPTION = ("Relation-aware multi-party emotional support conversations from couple and family therapy "
               "interviews. Six benchmark tasks: intervention timing (ITP), relation pattern (RPP), support target "
               "(STP), support strategy (SSP), emotion recognition (ER) and viewpoint prediction (VP).")
DIST_WHAT = {"itp": "should the therapist speak next (label)", "rpp": "relation pattern (label)",
             "stp": "support target (label)", "ssp": "support strategy (label)",
             "er": "gold intensity 0-10 (label_intensity)", "vp": "gold viewpoints per instance (label)"}


def _annotation_section(manifest: dict) -> str:
    rounds = manifest.get("annotation", {}).get("rounds", [])
    src = manifest["source"]
    if not rounds:
        if src.get("kind") == "rescue_jsonl":
            return ("The samples were imported from the published RESCUE JSONL. Per the paper, rows were "
                    "pre-annotated by an LLM (Gemini-3.1-Pro, from the video and its subtitles) and then reviewed "
                    "and corrected by three PhD-level annotators; the authors report no inter-annotator "
                    "agreement. This pipeline measured none either for these samples: no annotation round of "
                    "this data root produced them.")
        return ("No annotation round of this data root is recorded for these samples, so no agreement figures "
                f"are given (source: `{src.get('kind')}`).")
    rows = []
    for r in rounds:
        ov = r.get("override")
        rows.append([r["round"], r["annotators"], r.get("simulated_annotators", 0), r.get("units", "n/a"),
                     r.get("adjudicated_rows", 0), ", ".join(r.get("prefilled") or []) or "none",
                     "passed" if r["passed"] else
                     ("below threshold, released under an override" if ov else "below threshold")])
    text = [
        "Interviews go through blind annotation rounds in Label Studio: each annotator works in an own "
        "project and sees nobody else's answers. The transcript round starts from the pipeline's draft rows "
        "(speech recognition or subtitles, diarization, turn segmentation), shown as pre-filled values that "
        "annotators correct; a later round pre-fills only what earlier gold or a model proposed (never an empty "
        "value), and each pre-filled value is shown as proposed and taken only once the annotator accepted "
        "it or changed it, field by field. "
        "The pre-filled fields below are those the pushes really pre-filled (the pipeline's record of each "
        "push). Rows where annotators "
        "disagree go to an adjudicator, whose answer is gold; numbers take the median.",
        "",
        _md_table(["round", "annotators", "of them simulated", "units", "rows adjudicated", "pre-filled fields",
                   "gate"], rows),
        "",
        "### Agreement per round and field",
        "",
        "Krippendorff's alpha with the field's metric (nominal; interval; MASI for sets; presence = whether a "
        "record was given at all). Reading (Krippendorff 2004): alpha >= 0.800 reliable, >= 0.667 tentative "
        "conclusions only, below that unreliable.",
        "",
    ]
    frows = []
    for r in rounds:
        for f in r.get("fields", []):
            frows.append([r["round"], f["field"], f["metric"], _fmt(f.get("alpha")), f.get("threshold"),
                          f.get("n_units"), f.get("n_annotators"),
                          "yes" if f.get("alpha") is not None and f["alpha"] >= f["threshold"] else "NO"])
    text.append(_md_table(["round", "field", "metric", "alpha", "threshold", "units", "annotators", "reached"], frows))
    overrides = [r for r in rounds if r.get("override")]
    text += ["", "### Overrides", ""]
    if overrides:
        for r in overrides:
            ov = r["override"]
            fails = ", ".join(f"{f['field']} alpha {_fmt(f.get('alpha'))} < {f['threshold']}" for f in ov.get("failing", []))
            text.append(f"- round `{r['round']}` ({fails}): released on the decision of {ov.get('by')} "
                        f"(recorded_at: {ov.get('recorded_at', 'not recorded')}), reason: \"{ov.get('reason')}\"")
    else:
        text.append("None: every round reached its agreement thresholds.")
    return "\n".join(text)


def release_bibtex(manifest: dict, content_sha256: str) -> str:
    v = manifest["version"]
    key = "rescue_release_" + v.replace(".", "_")
    return (f"@misc{{{key},\n"
            f"  title = {{RESCUE release {v}: relation-aware multi-party emotional support conversations}},\n"
            f"  note  = {{Built with rescue-pipeline {manifest['pipeline_version']}; content sha256 "
            f"{content_sha256} (of the file list in manifest.json)}},\n"
            f"  howpublished = {{Dataset release {v}}}\n}}")


def _lineage_line(manifest: dict) -> str:
    """Which code built the release (manifest.lineage.code), in one sentence."""
    code = (manifest.get("lineage") or {}).get("code") or {}
    if "git_commit" in code:
        return (f"It was built at git commit `{code['git_commit']}`"
                + (" with uncommitted changes." if code.get("dirty") else "."))
    if "source_sha256" in code:
        return f"It was built from pipeline source sha256 `{code['source_sha256'][:16]}…` (not a git checkout)."
    return ""


def dataset_card(manifest: dict) -> str:
    """README.md of a release; every number comes from the manifest."""
    meta = front_matter(manifest)
    head = "---\n" + yaml.dump(meta, Dumper=_YAML_DUMPER, sort_keys=False, allow_unicode=True, width=100) + "---\n"
    card = manifest["card"]
    st = manifest["statistics"]
    cols = [*taxonomy.SCENARIOS, "all"]
    stat_rows = [
        ["Samples"] + [st[c]["samples"] for c in cols],
        ["Total duration (min)"] + [st[c]["total_duration_min"] for c in cols],
        ["Total turns"] + [st[c]["total_turns"] for c in cols],
        ["Avg. duration / sample (min)"] + [st[c]["avg_duration_min"] for c in cols],
        ["Avg. turns / sample"] + [st[c]["avg_turns"] for c in cols],
        ["Avg. speakers / sample (incl. therapist)"] + [st[c]["avg_speakers"] for c in cols],
        ["Therapist turn share"] + [f"{100 * st[c]['therapist_turn_share']:.1f}%" for c in cols],
    ]
    counts = manifest["counts"]
    count_rows = [[t.upper()] + [counts[t][c]["instances"] for c in taxonomy.SCENARIOS]
                  + [counts[t][c]["samples"] for c in taxonomy.SCENARIOS] for t in tasks.TASKS]
    ctx = manifest["task_settings"]["context_size"]
    dist = []
    for task in tasks.TASKS:
        for scenario in taxonomy.SCENARIOS:
            d = manifest["label_distributions"][task][scenario]
            dist.append([task.upper(), scenario, DIST_WHAT[task], _dist_text(d) if d else "-"])
    data_files = {k: v for k, v in manifest["files"].items() if k.startswith("data/")}
    paper = manifest.get("paper", {})
    paper_files = {k: v for k, v in manifest["files"].items() if k.startswith("paper/")}
    per_sample = {k: v for k, v in paper_files.items() if k.startswith("paper/data/")}
    file_rows = [[f"`{k}`", v["rows"], v["bytes"], f"`{v['sha256'][:16]}…`"] for k, v in sorted(data_files.items())]
    file_rows += [[f"`{k}`", v["rows"], v["bytes"], f"`{v['sha256'][:16]}…`"]
                  for k, v in sorted(paper_files.items()) if not k.startswith("paper/data/")]
    if "lineage.parquet" in manifest["files"]:
        lin = manifest["files"]["lineage.parquet"]
        file_rows.append(["`lineage.parquet`", lin["rows"], lin["bytes"], f"`{lin['sha256'][:16]}…`"])
    if per_sample:
        file_rows.append([f"`paper/data/**.json` ({len(per_sample)} files)", sum(v["rows"] for v in per_sample.values()),
                          sum(v["bytes"] for v in per_sample.values()), "each in manifest.json"])
    splits = manifest["splits"]
    markers = manifest.get("synthetic") or []
    banner = ""
    if markers:
        banner = ("> **SYNTHETIC / DEMO DATA - not the RESCUE benchmark.** This release was built from generated "
                  "interviews and/or answered by simulated annotators, to exercise the pipeline. Its text, labels "
                  "and agreement figures say nothing about real therapy conversations; do not train or evaluate "
                  "on it.\n>\n" + "\n".join(f"> - {m}" for m in markers) + "\n\n")
    license_line = (f"`{card['license']}`" + (f" - `{card['license_name']}`" if card["license"] == "other" else "")
                    + (f" ({card['license_link']})" if card["license_link"] else ""))
    src = manifest["source"]
    # the data's fingerprint: the sha256 of every released file (not the whole manifest, which also
    # holds when an override was recorded)
    content_sha = hashlib.sha256(store.canonical_json(manifest["files"]).encode("utf-8")).hexdigest()
    v = manifest["version"]
    body = f"""
# RESCUE {v}{' (SYNTHETIC DEMO)' if markers else ''}

{banner}{DESCRIPTION} Rebuilt by `rescue-pipeline` {manifest['pipeline_version']}.

`croissant.json` describes this release in Croissant 1.1 (MLCommons): every file with its sha256,
every config's columns, and the responsible-AI fields (how the data was collected and annotated,
annotators per item, each field's agreement with its interval, whether anything is synthetic, and
the lineage digests). `lineage.parquet` says what made each sample: the video's sha256, the
transcript's source, the diarizer's model and the segmenter's code digests, and per annotation round
the annotators (opaque ids) and the rows an adjudicator settled; `rescue release explain VERSION
SAMPLE_ID [ROW]` tells it in words. {_lineage_line(manifest)}

## Licence

{license_line}. {card['license_text']}

## Configs

`samples` (one line per interview clip), `rows` (one line per annotated turn; the relation
label sits on the therapist row it annotates, `relation_cycle_*`), and one config per task.
Every task table has `sample_id`, `scenario`, `row_index`, `instance_id`, its inputs, and the
gold in the columns starting with `label`. Context rows (`prior_context`) carry input fields
only: no emotion, viewpoint, strategy, relation or utterance-type annotation. `instance_id` is
opaque (`<task>_` + 20 hex digits of a hash of task, sample and row): stable across releases,
and it tells nothing about the answer. Categorical gold columns are `class_label` features
(names in the YAML header); the STP label is a participant name or the group label.
The `samples` / `rows` configs and `paper/` hold every annotated row, so they contain every task's
gold: when evaluating, give a model only the task config's input columns (not `label*`).

```python
from datasets import load_dataset
ds = load_dataset("path/to/releases/{v}", "itp")
```

## Files in the paper's shapes (`paper/`)

For the RESCUE authors' evaluation scripts and anyone who has code for their files:

- `paper/benchmark.jsonl`: one sample per line in the shape of the published `benchmark_191.jsonl`
  (the relation label copied onto the row before each therapist row as `relation_pattern*`).
  Two fields that shape lacks are added only where it cannot carry a value: the sample's
  `duration_s` (when known) and, on a therapist row with no row before it, its own
  `relation_cycle_reason` / `relation_cycle_evidence_rows`; `rescue import-rescue` reads both back.
- `paper/er.jsonl`, `paper/vp.jsonl`: ER and VP instances in the published field order; as there,
  `prior_context` holds every prior row (the Parquet configs use the context sizes below) and the
  ids are `<sample_id>__row<k>`. No row clips are released, so `clip_path` / `clip_duration_sec`
  are absent (where a release ships clips they are paths relative to the release).
- `paper/data/<sample_id>.json`: the per-sample layout the scripts read: each file is one sample
  with its `rows`; therapist rows also carry `relation_cycle_reason` / `relation_cycle_evidence_rows`
  (what the RPP script reads). The scripts resolve `--data-root` and need it inside their checkout:
  from their checkout run `cp -r RELEASE/paper/data/. data/` (RELEASE: this release's folder; or
  `cp -al` for hard links; a symbolic link fails), then their README's commands with `--data-root data`. RPP takes one
  `--group-mode` per run: pass `--sample-ids-file` with that scenario's ids (`scenario` in
  `paper/benchmark.jsonl`).

{paper.get('samples', 0)} sample files; `rescue release export-paper {v} DIR` writes the same files from the release.

## Statistics (paper Table 3 shape)

{_md_table(["Statistic", *cols], stat_rows)}

## Task instances (paper Table 6 shape)

{_md_table(["Task", "Couple inst.", "Family inst.", "Couple samp.", "Family samp."], count_rows)}

Context sizes: {", ".join(f"{t.upper()} {'all prior rows' if n < 0 else n}" for t, n in ctx.items())}.

## Label distributions

{_md_table(["Task", "Scenario", "What", "Distribution"], dist)}

## How the data was built

Source: `{src.get('kind')}` - {source_text(manifest)} Pipeline:
`rescue-pipeline` {manifest['pipeline_version']}. Every sample is validated against the RESCUE row rules
(V1-V13) and task instances are derived as the paper's scripts derive them. Validation problems
recorded at build time: {manifest['validation']['problems']}.

{_annotation_section(manifest)}

## Splits

`test` holds every sample not in `dev` (the paper evaluates on all samples). Dev fraction:
{splits['dev_fraction']}; whole couple/family groups are assigned by sha256 of the group id, so
a sample never moves between splits when interviews are added. Samples per split:
{", ".join(f"{k} {n}" for k, n in splits['samples'].items())}.

## Sensitive data

{sensitive_text(manifest)}

## Consent

{consent_text(manifest)}

## Intended use

Research on relation-aware, multi-party emotional support: evaluating models on the six tasks,
studying therapist intervention timing and strategy, and comparing with the RESCUE paper.

## Out-of-scope use

Not for diagnosing, profiling or making decisions about real people or couples; not for building
systems that act as a therapist without clinical oversight; not for identifying the people in the
interviews or linking them to other data; not for training on the test split of an evaluation.

## Limitations

- Documentary interviews are a selected, edited slice of therapy (who agrees to be filmed, what is
  broadcast); couples dominate and families are few.
- The high-level labels (relation pattern, strategy, emotion) are subjective; check the agreement
  figures above before trusting a field, and expect long-tailed label distributions.
- ITP gold is an observational proxy: "yes" means the therapist did speak next, not that it was
  the best moment.
- Text only: tone and visible behaviour are given as annotators' descriptions, not media.

## Citation

The RESCUE paper:

```bibtex
{card['paper_bibtex']}
```

This release:

```bibtex
{release_bibtex(manifest, content_sha)}
```

## Files

{_md_table(["file", "rows", "bytes", "sha256"], file_rows)}
"""
    return head + body
