"""Truth by provenance: a generated interview is marked where it is made (the batch manifest's
``synthetic`` column), carried by ingest into the catalog, and from there into the release's
manifest and card; a recording in a group named like the generator's is not marked; a sample the
data root never ingested is described as such; a release from a file claims no rounds of the data
root. Real ffmpeg and espeak-ng (the synthetic interviews), the real ingest and release stages."""
from __future__ import annotations

import copy
import csv
import io

import pytest

from pipeline import corpus
from pipeline.benchmark import release
from pipeline.catalog import read_catalog
from pipeline.media.ingest import ingest_batch
from pipeline.media.manifest import read_manifest, synthetic_value
from pipeline.store import prepare_data_root
from pipeline.synthetic import interviews as synth
from pipeline.paths import DataRoot


def test_manifest_cell_says_generated_or_recorded():
    assert [synthetic_value(v) for v in (None, "", "no", "False", "0", False)] == [None] * 6
    assert [synthetic_value(v) for v in ("yes", "TRUE", "1", True)] == ["yes"] * 4
    assert synthetic_value(" pipeline.synthetic.batch scale=1 seed=3 ") == "pipeline.synthetic.batch scale=1 seed=3"


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    """Two generated interviews; the second one's manifest line is rewritten as a recording's (named
    ``synthetic_couple/...`` all the same)."""
    batch = tmp_path_factory.mktemp("batch")
    synth.make_batch(batch, [{"name": "gen01", "scenario": "couple", "seed": 3, "n_rows": 8},
                             {"name": "rec01", "scenario": "couple", "seed": 4, "n_rows": 8}])
    rows = list(csv.DictReader(io.StringIO((batch / "manifest.csv").read_text())))
    assert rows[0]["synthetic"] == "pipeline.synthetic.interviews seed=3"
    rows[1]["synthetic"] = ""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    (batch / "manifest.csv").write_text(out.getvalue())
    assert [e.synthetic for e in read_manifest(batch / "manifest.csv")] == ["pipeline.synthetic.interviews seed=3", None]
    root = tmp_path_factory.mktemp("root")
    report = ingest_batch(batch, prepare_data_root(DataRoot(root)))
    assert not report.quarantined, report.quarantined
    return root


def test_ingest_carries_the_generator_into_the_catalog(ingested):
    cat = read_catalog(DataRoot(ingested)).to_pylist()
    assert {r["sample_id"]: r["synthetic"] for r in cat} == {
        "synthetic_couple/gen01": "pipeline.synthetic.interviews seed=3", "synthetic_couple/rec01": None}


def _corpus_of(root, head_input, ids):
    samples = []
    for sid, sample in zip(ids, head_input.samples):
        s = copy.deepcopy(sample)
        s["sample_id"], s["group_id"] = sid, sid.split("/")[0]
        samples.append(s)
    corpus.save_corpus(DataRoot(root), samples)


def test_release_and_card_say_what_the_catalog_proves(ingested, head_input, tmp_path):
    # one generated, one recorded (named like a generated one), one never ingested here
    _corpus_of(ingested, head_input, ["synthetic_couple/gen01", "synthetic_couple/rec01", "elsewhere/imp01"])
    inp = release.load_corpus_input(DataRoot(ingested))
    res = release.build_release(inp, "1.0.0", DataRoot(ingested))
    man = res.manifest
    assert man["origin"] == {"recorded": 1, "generated": {"pipeline.synthetic.interviews seed=3": 1},
                             "not_ingested_here": 1}
    assert man["synthetic"] == ["1 samples are generated interviews (pipeline.synthetic.interviews seed=3)"]
    card = (res.path / "README.md").read_text()
    assert "SYNTHETIC / DEMO DATA" in card
    assert "1 recorded interviews" in card and "1 generated interviews" in card
    assert "1 samples not ingested here (imported into the corpus with `rescue import-rescue`" in card
    # recordings are in it: the sensitive-data section says so, but nothing claims documentary material
    assert "identifiable people" in card and "documentary" not in card
    assert "annotations_creators:\n- machine-generated" in card


def test_a_wholly_generated_corpus_claims_no_people_or_experts(ingested, head_input, tmp_path):
    root = tmp_path / "gen"
    prepare_data_root(DataRoot(root))
    (root / "catalog.parquet").write_bytes((ingested / "catalog.parquet").read_bytes())
    _corpus_of(root, head_input, ["synthetic_couple/gen01"])
    res = release.build_release(release.load_corpus_input(DataRoot(root)), "1.0.0", DataRoot(root))
    card = (res.path / "README.md").read_text()
    for claim in ("identifiable people", "documentary", "expert-generated", "agreed to be filmed"):
        assert claim not in card, claim
    assert "Every sample is generated" in card and "nobody appears in the data" in card


def test_a_release_from_a_file_describes_the_file(head_input, tmp_path):
    res = release.build_release(head_input, "1.0.0", DataRoot(tmp_path))
    assert "origin" not in res.manifest and res.manifest["annotation"]["rounds"] == []
    card = (res.path / "README.md").read_text()
    assert "imported from a file in the shape of the published RESCUE" in card
    assert "annotations_creators:\n- expert-generated" in card  # the paper's PhD-level annotators
    assert "probed and hashed" not in card
