"""``croissant.json`` in every release: Croissant 1.1 that mlcroissant (the MLCommons reference
library) validates without errors, its responsible-AI fields as mlcroissant reads them back, each
file's sha256 as released, and a flat record set loaded through mlcroissant's own reader."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging

import pytest

from pipeline.benchmark import release
from pipeline.benchmark.croissant import CONTEXT
from pipeline.paths import DataRoot

mlc = pytest.importorskip("mlcroissant", reason="mlcroissant is a test dependency (pip install -e '.[test]')")


def _dataset(path):
    logging.getLogger("absl").setLevel(logging.ERROR)
    return mlc.Dataset(jsonld=path / "croissant.json")  # raises ValidationError on any error


def test_our_context_is_croissant_1_1s():
    from mlcroissant._src.core.context import Context, CroissantVersion
    from mlcroissant._src.core.rdf import make_context

    ctx = Context()
    ctx.conforms_to = CroissantVersion.V_1_1
    assert CONTEXT == make_context(ctx)


def test_a_file_release_validates_and_claims_no_rounds(head_input, tmp_path):
    res = release.build_release(head_input, "1.0.0", DataRoot(tmp_path))
    ds = _dataset(res.path)
    meta = ds.metadata
    assert meta.version == "1.0.0" and meta.conforms_to == ["http://mlcommons.org/croissant/1.1"]
    assert meta.data_collection_type == ["Secondary Data Analysis"]
    assert "published RESCUE" in meta.data_collection
    assert meta.data_annotation_protocol == [
        "No annotation round of this pipeline produced these samples; the source's own account applies."]
    assert meta.annotations_per_item is None and not meta.data_annotation_analysis
    # every released Parquet file (the configs and lineage.parquet), with the sha256 of its bytes
    doc = json.loads((res.path / "croissant.json").read_text())
    files = {f["contentUrl"]: f["sha256"] for f in doc["distribution"]}
    assert files == {rel: hashlib.sha256((res.path / rel).read_bytes()).hexdigest()
                     for rel in res.manifest["files"] if rel.startswith("data/") or rel == "lineage.parquet"}
    # the lineage digests: the code the release was built from, the packages; lineage as records
    code = res.manifest["lineage"]["code"]
    assert meta.data_preprocessing_protocol[0].startswith(
        f"Built by the rescue pipeline at git commit {code['git_commit']}" if "git_commit" in code else
        f"Built by the rescue pipeline, source sha256 {code['source_sha256']}")
    assert meta.data_preprocessing_protocol[1].startswith("Packages: ") and "pyarrow" in meta.data_preprocessing_protocol[1]
    lineage = list(ds.records("lineage"))
    assert sorted(r["lineage/sample_id"].decode() for r in lineage) == sorted(s["sample_id"] for s in head_input.samples)
    assert doc["rai:hasSyntheticData"] is False
    # mlcroissant's reader on a flat record set gives the released values
    first = next(iter(ds.records("samples/test")))
    ids = {s["sample_id"] for s in head_input.samples}
    assert first["samples/test/sample_id"].decode() in ids
    assert "croissant.json" in (res.path / "README.md").read_text()


def test_rounds_agreement_with_interval_and_simulated_annotators(small_input, tmp_path):
    from pipeline import store
    from pipeline.labelstudio.desks import Desks
    from pipeline.paths import DataRoot

    fields = [{"field": "utterance_type", "metric": "nominal", "alpha": 0.81, "ci_low": 0.7, "ci_high": 0.9,
               "threshold": 0.667, "n_units": 40, "n_annotators": 3}]
    store.atomic_write_text(DataRoot(tmp_path).gate("emotion"), store.canonical_json(
        {"round": "emotion", "passed": True, "labels_sha256": "ab" * 32, "failing": [], "fields": fields}))
    Desks(DataRoot(tmp_path)).register("bot@example.org", "annotator", simulated=True)
    import pyarrow as pa
    import pyarrow.parquet as pq

    labels = DataRoot(tmp_path).labels("emotion")
    labels.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"annotator": ["bot@example.org", "ann@example.org"], "sample_id": ["s/1", "s/1"],
                             "row_index": [1, 1]}), labels)
    inp = dataclasses.replace(small_input, from_data_root=True)
    res = release.build_release(inp, "1.0.0", DataRoot(tmp_path))
    meta = _dataset(res.path).metadata
    assert meta.annotations_per_item == "3" and meta.data_annotation_platform == ["Label Studio"]
    assert meta.data_annotation_analysis == [
        "round emotion, field utterance_type: Krippendorff's alpha 0.810 (bootstrap 95% interval 0.700 to 0.900) "
        "(nominal; 40 units, 3 annotators; threshold 0.667)"]
    assert meta.annotator_demographics == ["Not recorded. Annotators by round: emotion: 1 of 2 simulated."]
    doc = json.loads((res.path / "croissant.json").read_text())
    assert doc["rai:hasSyntheticData"] is True  # the synthetic corpus, and a simulated annotator
    assert any(x.startswith("Not real data: ") for x in doc["rai:dataLimitations"])
