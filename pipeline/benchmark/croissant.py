"""``croissant.json``: a release described in Croissant 1.1 (MLCommons) with its responsible-AI
fields, from the release's manifest alone (as the dataset card is): the files with their sha256,
one record set per config and split with every column, and the story behind the rows - where the
samples came from, how they were annotated, how many annotators per item, the agreement of each
field, whether anything is generated or simulated - and the lineage digests: the code's commit (or
source digest), the packages' versions, each model's sha256 (``rai:dataPreprocessingProtocol``,
``rai:machineAnnotationTools``) and ``lineage.parquet``, one record per sample. What the manifest
does not prove is not claimed.
"""
from __future__ import annotations

import pyarrow as pa

from pipeline import schemas
from pipeline.benchmark.provenance import generated_only, sensitive_text, source_text
from pipeline.benchmark.release_lineage import LINEAGE, LINEAGE_FILE

CONFORMS_TO = "http://mlcommons.org/croissant/1.1"
# The standard @context of Croissant 1.1 (mlcroissant's own; a test keeps the two equal).
CONTEXT = {
    "@language": "en", "@vocab": "https://schema.org/", "arrayShape": "cr:arrayShape", "citeAs": "cr:citeAs",
    "column": "cr:column", "conformsTo": "dct:conformsTo", "containedIn": "cr:containedIn",
    "cr": "http://mlcommons.org/croissant/", "rai": "http://mlcommons.org/croissant/RAI/",
    "data": {"@id": "cr:data", "@type": "@json"}, "dataType": {"@id": "cr:dataType", "@type": "@vocab"},
    "dct": "http://purl.org/dc/terms/", "description": {"@container": "@language"},
    "equivalentProperty": "cr:equivalentProperty", "examples": {"@id": "cr:examples", "@type": "@json"},
    "extract": "cr:extract", "field": "cr:field", "fileProperty": "cr:fileProperty", "fileObject": "cr:fileObject",
    "fileSet": "cr:fileSet", "format": "cr:format", "includes": "cr:includes", "isArray": "cr:isArray",
    "isLiveDataset": "cr:isLiveDataset", "jsonPath": "cr:jsonPath", "key": "cr:key", "md5": "cr:md5",
    "name": {"@container": "@language"}, "parentField": "cr:parentField", "path": "cr:path",
    "recordSet": "cr:recordSet", "references": "cr:references", "regex": "cr:regex", "repeated": "cr:repeated",
    "replace": "cr:replace", "samplingRate": "cr:samplingRate", "sc": "https://schema.org/",
    "separator": "cr:separator", "source": "cr:source", "subField": "cr:subField", "transform": "cr:transform",
}
# Its vocabularies' addresses are never V16 findings (pipeline.validate.private_scan.VOCABULARIES).


def _data_type(t: pa.DataType) -> str:
    if pa.types.is_boolean(t):
        return "sc:Boolean"
    if pa.types.is_integer(t):
        return "sc:Integer"
    if pa.types.is_floating(t):
        return "sc:Float"
    return "sc:Text"


def _field(rs: str, name: str, t: pa.DataType, file_id: str, column: str, path: str = "") -> dict:
    fid = f"{rs}/{path + name}"
    out: dict = {"@type": "cr:Field", "@id": fid, "name": name}
    is_list = pa.types.is_list(t) or pa.types.is_large_list(t)
    inner = t.value_type if is_list else t
    if is_list:
        out["isArray"] = True
        out["arrayShape"] = "-1"
    if pa.types.is_struct(inner):
        out["subField"] = [_field(rs, f.name, f.type, file_id, column, f"{path}{name}/") for f in inner]
    else:
        out["dataType"] = _data_type(inner)
    source: dict = {"fileObject": {"@id": file_id}, "extract": {"column": column}}
    if path:  # a part of a nested column
        source["transform"] = {"jsonPath": ".".join([*path.strip("/").split("/")[1:], name])}
    out["source"] = source
    return out


def _record_sets(manifest: dict) -> tuple[list[dict], list[dict]]:
    files, record_sets = [], []
    tables = {"samples": schemas.SAMPLES, "rows": schemas.ROWS, **schemas.TASK_SCHEMAS}
    for rel, info in sorted(manifest["files"].items()):
        if rel == LINEAGE_FILE:
            files.append({"@type": "cr:FileObject", "@id": rel, "name": rel, "contentUrl": rel,
                          "encodingFormat": "application/x-parquet", "sha256": info["sha256"],
                          "contentSize": f"{info['bytes']} B"})
            record_sets.append({"@type": "cr:RecordSet", "@id": "lineage", "name": "lineage",
                                "description": f"what made each sample: {info['rows']} records",
                                "field": [_field("lineage", f.name, f.type, rel, f.name) for f in LINEAGE]})
            continue
        parts = rel.split("/")
        if parts[0] != "data" or len(parts) != 3:
            continue
        config, split = parts[1], parts[2].removesuffix(".parquet")
        files.append({"@type": "cr:FileObject", "@id": rel, "name": rel, "contentUrl": rel,
                      "encodingFormat": "application/x-parquet", "sha256": info["sha256"],
                      "contentSize": f"{info['bytes']} B"})
        rs = f"{config}/{split}"
        record_sets.append({"@type": "cr:RecordSet", "@id": rs, "name": rs,
                            "description": f"config {config}, split {split}: {info['rows']} records",
                            "field": [_field(rs, f.name, f.type, rel, f.name) for f in tables[config]]})
    return files, record_sets


def _agreement(rounds: list[dict]) -> list[str]:
    out = []
    for r in rounds:
        for f in r.get("fields", []):
            alpha = f.get("alpha")
            lo, hi = f.get("ci_low"), f.get("ci_high")
            interval = (f" (bootstrap 95% interval {lo:.3f} to {hi:.3f})"
                        if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) else " (no interval recorded)")
            out.append(f"round {r['round']}, field {f['field']}: Krippendorff's alpha "
                       f"{'n/a' if alpha is None else f'{alpha:.3f}'}{interval} ({f.get('metric')}; "
                       f"{f.get('n_units')} units, {f.get('n_annotators')} annotators; threshold {f.get('threshold')})")
    return out


def lineage_text(manifest: dict) -> tuple[list[str], list[str]]:
    """The lineage digests in words: (what processed the data, the machine tools with their sha256)."""
    lin = manifest.get("lineage")
    if not lin:
        return [], []
    code = lin.get("code") or {}
    built = (f"Built by the rescue pipeline at git commit {code['git_commit']}"
             + (" with uncommitted changes" if code.get("dirty") else "") if "git_commit" in code else
             f"Built by the rescue pipeline, source sha256 {code.get('source_sha256')} (not a git checkout)")
    packages = ", ".join(f"{n} {v or 'not installed'}" for n, v in sorted((lin.get("packages") or {}).items()))
    out = [built + ".", f"Packages: {packages}."]
    for stage, values in sorted((lin.get("settings") or {}).items()):
        out.append(f"Settings of the {stage} stage: "
                   + ", ".join(f"{k} {v}" for k, v in sorted(values.items())) + ".")
    out.append(f"{LINEAGE_FILE}: per sample the video's sha256, the transcript's source (subtitle file sha256 or "
               "ASR model digest), the diarizer's model digest, the segmenter's code digest, and per round the "
               "annotators (opaque ids) and the rows an adjudicator settled.")
    tools = [f"{name}: sha256 {d if isinstance(d, str) else ', '.join(d)}"
             for name, d in sorted((lin.get("models") or {}).items())]
    return out, tools


def croissant(manifest: dict, *, description: str, sensitive: str, source: str, generated_only: bool) -> dict:
    """The release's Croissant document; the words about source and sensitive data are the card's."""
    files, record_sets = _record_sets(manifest)
    rounds = manifest.get("annotation", {}).get("rounds", [])
    markers = manifest.get("synthetic") or []
    card = manifest["card"]
    doc: dict = {
        "@context": CONTEXT,
        "@type": "sc:Dataset",
        "conformsTo": CONFORMS_TO,
        "name": f"RESCUE {manifest['version']}" + (" (synthetic demo)" if markers else ""),
        "description": description,
        "version": manifest["version"],
        "license": card["license_link"] or card["license"],
        "citeAs": card["paper_bibtex"],
        "distribution": files,
        "recordSet": record_sets,
        "rai:dataCollection": source,
        "rai:dataCollectionType": ["Generated"] if generated_only else
        ["Secondary Data Analysis"] if manifest["source"].get("kind") == "rescue_jsonl" else ["Others"],
        "rai:hasSyntheticData": bool(markers),
        "rai:personalSensitiveInformation": [sensitive],
        "rai:dataUseCases": ["Evaluating models on the six RESCUE tasks: intervention timing, relation pattern, "
                             "support target, support strategy, emotion recognition, viewpoint prediction."],
        "rai:dataLimitations": ["Subjective high-level labels; check each field's agreement before trusting it.",
                                "Intervention timing gold is observational: the therapist did speak next."],
    }
    processing, tools = lineage_text(manifest)
    if processing:
        doc["rai:dataPreprocessingProtocol"] = processing
    if tools:
        doc["rai:machineAnnotationTools"] = tools
    if markers:
        doc["rai:dataLimitations"].insert(0, "Not real data: " + "; ".join(markers) + ".")
    if rounds:
        per_item = sorted({f.get("n_annotators") for r in rounds for f in r.get("fields", []) if f.get("n_annotators")})
        simulated = [f"{r['round']}: {r.get('simulated_annotators', 0)} of {r['annotators']} simulated" for r in rounds]
        doc["rai:dataAnnotationProtocol"] = [
            "Blind rounds in Label Studio, one server per annotator (nobody sees another's answers); disagreements "
            "go to an adjudicator, whose answer is gold. Rounds: " + ", ".join(r["round"] for r in rounds) + "."]
        doc["rai:dataAnnotationPlatform"] = ["Label Studio"]
        doc["rai:annotationsPerItem"] = "-".join(str(n) for n in (per_item[0], per_item[-1])) if len(per_item) > 1 \
            else str(per_item[0]) if per_item else "unknown"
        doc["rai:annotatorDemographics"] = ["Not recorded. Annotators by round: " + "; ".join(simulated) + "."]
        doc["rai:dataAnnotationAnalysis"] = _agreement(rounds)
    else:
        doc["rai:dataAnnotationProtocol"] = [
            "No annotation round of this pipeline produced these samples; the source's own account applies."]
    return doc


def release_croissant(manifest: dict) -> dict:
    """``croissant.json``: the release in Croissant 1.1, its responsible-AI fields in the card's words."""
    from pipeline.benchmark.card import DESCRIPTION

    return croissant(manifest, description=DESCRIPTION, sensitive=sensitive_text(manifest),
                     source=source_text(manifest), generated_only=generated_only(manifest))
