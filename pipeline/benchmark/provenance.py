"""Where a release's samples came from, as the data root recorded it when they were made: the
catalog line of each ingested interview says whether a generator made it (the batch manifest's
``synthetic`` column), and a corpus sample with no catalog line was not ingested here (imported
with ``rescue import-rescue`` or placed there by hand). The card and the manifest say only what this
record proves: never a guess from a sample's or group's name.
"""
from __future__ import annotations

from collections import Counter

from pipeline.catalog import read_catalog
from pipeline.paths import DataRoot

# The synthetic corpus writes source_file "synthetic/<sample_id>.json" (its own record in the data);
# generated interviews are known from the catalog (the batch manifest's synthetic column), never from
# their group's name.
SYNTHETIC_SOURCE_PREFIX = "synthetic/"
DEMO_OVERRIDE_PREFIX = "DEMO"  # an override reason so marked was made for a demo


def corpus_origin(root: DataRoot, sample_ids: list[str]) -> dict:
    """``{"recorded": n, "generated": {what made them: n}, "not_ingested_here": n}`` over ``sample_ids``."""
    catalog = read_catalog(root)
    made_by = dict(zip(catalog.column("sample_id").to_pylist(), catalog.column("synthetic").to_pylist()))
    generated: Counter = Counter()
    recorded = elsewhere = 0
    for sid in sample_ids:
        if sid not in made_by:
            elsewhere += 1
        elif made_by[sid]:
            generated[made_by[sid]] += 1
        else:
            recorded += 1
    return {"recorded": recorded, "generated": dict(sorted(generated.items())), "not_ingested_here": elsewhere}


def synthetic_markers(source: dict, samples: list[dict], rounds: list[dict], origin: dict | None = None) -> list[str]:
    """Why this release is not real data (empty: nothing says it is synthetic or simulated), from the
    records made where the data was made: the input's kind, the synthetic corpus's own source_file,
    the catalog's generator per interview (``origin``), the rounds' simulated annotators."""
    out = []
    if source.get("kind") == "synthetic":
        out.append(f"the input is the synthetic corpus ({source.get('generator', 'pipeline.synthetic.corpus')})")
    n_src = sum(1 for s in samples if (s.get("source_file") or "").startswith(SYNTHETIC_SOURCE_PREFIX))
    if n_src:
        out.append(f"{n_src} samples come from the synthetic corpus (source_file {SYNTHETIC_SOURCE_PREFIX}...)")
    for made_by, n in (origin or {}).get("generated", {}).items():
        out.append(f"{n} samples are generated interviews ({made_by})")
    for r in rounds:
        if r.get("simulated_annotators"):
            out.append(f"round {r['round']}: {r['simulated_annotators']} of {r['annotators']} annotators are simulated")
        ov = r.get("override") or {}
        if str(ov.get("reason", "")).startswith(DEMO_OVERRIDE_PREFIX):
            out.append(f"round {r['round']}: released under a demo override")
    return out


SOURCE_TEXT = {
    "rows_dir": ("gold rows read from a folder given at build time; this release records its files' hashes, "
                 "not how the rows were made."),
    "rescue_jsonl": "imported from a file in the shape of the published RESCUE benchmark_191.jsonl.",
    "synthetic": "the synthetic corpus: generated word-salad interviews with labels drawn to the paper's skews.",
}
MADE_HERE = ("videos probed and hashed, transcribed (subtitles where given, else WhisperX), diarized (pyannote) "
             "and segmented into draft turns by this pipeline")


def source_text(manifest: dict) -> str:
    """How the samples were made, as far as the data root's records say (the corpus's ``origin``)."""
    src, origin = manifest["source"], manifest.get("origin")
    if origin is None:
        return SOURCE_TEXT.get(src.get("kind"), SOURCE_TEXT["rows_dir"])
    rounds = " and annotated in the rounds below" if manifest.get("annotation", {}).get("rounds") else ""
    parts = []
    if origin.get("recorded"):
        parts.append(f"{origin['recorded']} recorded interviews: {MADE_HERE}{rounds}")
    for made_by, n in origin.get("generated", {}).items():
        parts.append(f"{n} generated interviews ({made_by}; synthetic voices reading generated text): "
                     f"{MADE_HERE}{rounds}")
    if origin.get("not_ingested_here"):
        parts.append(f"{origin['not_ingested_here']} samples not ingested here (imported into the corpus with "
                     "`rescue import-rescue`, or placed there by hand): their own source's account applies")
    return "the data root's corpus: " + "; ".join(parts) + "." if parts else "the data root's corpus (empty)."


def generated_only(manifest: dict) -> bool:
    """Every sample is known to be generated: no real person is in the data."""
    origin = manifest.get("origin") or {}
    n = manifest["statistics"]["all"]["samples"] if "statistics" in manifest else None
    return manifest["source"].get("kind") == "synthetic" or (
        bool(origin) and sum(origin.get("generated", {}).values()) == n)


def sensitive_text(manifest: dict) -> str:
    if generated_only(manifest):
        return ("Every sample is generated (synthetic voices reading generated text): no real person's words, "
                "relationships or inner states are in it. No audio, video, voice prints, clip files, absolute "
                "paths or annotator identities are released; annotators appear only as counts.")
    return ("The conversations are therapy sessions: they describe relationships, conflict, family life and\n"
            "emotional distress of identifiable people, and the labels describe their inner states. Transcripts\n"
            "(`dialogue_cleaned`), speaker names and the emotion, viewpoint and relation annotations are all\n"
            "sensitive. No audio, video, voice prints, clip files, absolute paths or annotator identities are\n"
            "released; annotators appear only as counts.")


_REMOVAL = ("A person who appears in the data and asks to be removed should be removed in the next version "
            "(`rescue release diff` shows what a version removed).")


def consent_text(manifest: dict) -> str:
    if generated_only(manifest):
        return "No consent applies: nobody appears in the data. The pipeline's generator made every interview."
    if manifest["source"].get("kind") == "rescue_jsonl":
        return ("The published RESCUE samples come from documentary material; the people in it agreed to be "
                "filmed for that publication, not to this use of it. Whoever distributes this release is "
                "responsible for the rights to the source videos and for any data-use agreement their terms "
                "require. " + _REMOVAL)
    return ("This pipeline keeps no record of how the interviews were obtained or what the people in them "
            "agreed to. Whoever distributes this release must hold the rights to the source recordings and the "
            "consent their terms require. " + _REMOVAL)
