"""Lineage on the demo's own path: one synthetic interview through the CLI path the demo's
deployments run (``rescue ingest | transcribe | diarize | segment`` in processes of their own,
every round answered by simulated people in real desks - one Label Studio each - pulled,
measured, adjudicated, gold, ``rescue release build``: tests/flows/test_cli_path.py shows that
path gives the flows' release bytes). ``rescue release explain`` then tells a row's story: its
video span, the models, the segmenter's code digest, the annotators (opaque ids) and the
adjudication, each checked against what the data root recorded; no e-mail reaches
``lineage.parquet``; ``croissant.json`` carries the lineage digests and mlcroissant validates it."""
from __future__ import annotations

import json
import logging
import re
import subprocess

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from pipeline import lineage
from pipeline.catalog import read_catalog
from pipeline.cli import app
from pipeline.config import Settings
from pipeline.media import keys
from pipeline.paths import DataRoot
from pipeline.store import sha256_file
from tests.flows.conftest import desks_of
from tests.flows.test_cli_path import ADJUDICATOR, ANNOTATORS, PEOPLE, SID, _cli_path

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo_release(tmp_path_factory):
    from pipeline.synthetic import interviews as synth

    base = tmp_path_factory.mktemp("lineage-demo")
    batch = base / "batch"
    synth.make_batch(batch, [{"name": "e2e01", "scenario": "couple", "seed": 11, "n_rows": 8, "group": "e2e_couple"}])
    root, home = base / "data", base / "home"
    home.mkdir()
    with desks_of(root, PEOPLE) as desks:
        release = _cli_path(root, batch, desks, home)
    return root, release, batch


def test_explain_tells_a_rows_story_from_the_records(demo_release):
    root, release, batch = demo_release
    manifest = json.loads((release / "manifest.json").read_text())
    table = pq.read_table(release / "lineage.parquet").to_pylist()
    assert [r["sample_id"] for r in table] == [SID] and manifest["files"]["lineage.parquet"]["rows"] == 1
    rec = table[0]
    r = DataRoot(root)
    # each digest is what the data root recorded when the stage ran
    cat = read_catalog(DataRoot(root)).to_pylist()[0]
    assert rec["video_sha256"] == cat["sha256"] == sha256_file(batch / "e2e01.mp4")
    assert rec["transcript_source"] == "subtitles"
    assert rec["transcript_sha256"] == lineage.read_record(r, "ingest", SID)["inputs"]["subtitles"]
    diar = Settings.from_env(root).models_dir / keys.OFFLINE_DIARIZATION
    assert rec["diarizer_model"] == keys.OFFLINE_DIARIZATION and rec["diarizer_sha256"] == lineage.model_digest(diar)
    assert rec["segmenter_code_sha256"] == lineage.read_record(r, "segment", SID)["code_digest"]
    # every round, its annotators as opaque ids, and the rows the adjudicator settled
    from pipeline.annotation.rounds import round_names

    assert [x["round"] for x in rec["rounds"]] == list(round_names())
    for x in rec["rounds"]:
        assert x["annotators"] == ["annotator-1", "annotator-2"], x
        adj = pq.read_table(r.adjudications(x["round"])) if r.adjudications(x["round"]).is_file() else None
        settled = sorted({i for s, i in zip(adj["sample_id"].to_pylist(), adj["row_index"].to_pylist()) if s == SID}) \
            if adj is not None else []
        assert x["adjudicated_rows"] == settled and x["adjudicated"] == bool(settled)
    # no e-mail, no desk, no absolute path in the file
    text = json.dumps(pq.read_table(release / "lineage.parquet").to_pylist())
    for person in (*ANNOTATORS, ADJUDICATOR):
        assert person.split("@")[0] not in text
    assert "@" not in text and str(root) not in text
    # the manifest: code, packages, models, settings
    lin = manifest["lineage"]
    head = subprocess.run(["git", "-C", str(lineage.SOURCE_ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    assert lin["code"]["git_commit"] == head and isinstance(lin["code"]["dirty"], bool)
    assert lin["packages"]["rescue-pipeline"] and "torch" in lin["packages"] and "label-studio" in lin["packages"]
    assert lin["models"] == {keys.OFFLINE_DIARIZATION: rec["diarizer_sha256"]}
    assert lin["settings"]["transcribe"] == {"backend": "subtitles"} and "config" in lin["settings"]["segment"]
    assert "speaking_order" not in lin["settings"]["segment"]

    # the story of a row that an adjudicator settled (or the first row when none was)
    rows = pq.read_table(release / "data" / "rows" / "test.parquet").to_pylist()
    settled = {(x["round"], i) for x in rec["rounds"] for i in x["adjudicated_rows"]}
    row = min((i for _, i in settled), default=rows[0]["row_index"])
    the_row = next(x for x in rows if x["row_index"] == row)
    out = CliRunner().invoke(app, ["release", "explain", "0.1.0", SID, str(row), "--data-root", str(root)])
    assert out.exit_code == 0, out.output
    text = out.output
    assert f"video span: {the_row['start_time']:.2f}-{the_row['end_time']:.2f} s" in text
    assert f"video: sha256 {rec['video_sha256']}" in text
    assert f"transcript: from the subtitle file, sha256 {rec['transcript_sha256']}" in text
    assert f"diarizer: model {keys.OFFLINE_DIARIZATION}, sha256 {rec['diarizer_sha256']}" in text
    assert f"segmenter: code sha256 {rec['segmenter_code_sha256']}" in text
    for x in rec["rounds"]:
        line = next(ln for ln in text.splitlines() if ln.strip().startswith(f"round {x['round']}:"))
        assert "annotators annotator-1, annotator-2" in line
        assert ("adjudicated (an adjudicator settled this row)" in line) == ((x["round"], row) in settled), line
    assert settled, "the simulated annotators disagree somewhere: some row is adjudicated"
    assert f"release built from: git commit {head}" in text
    assert all(len(ln) < 200 for ln in text.splitlines()) and "@" not in text


def test_croissant_carries_the_lineage_digests(demo_release):
    mlc = pytest.importorskip("mlcroissant")
    _, release, _ = demo_release
    logging.getLogger("absl").setLevel(logging.ERROR)
    meta = mlc.Dataset(jsonld=release / "croissant.json").metadata
    rec = pq.read_table(release / "lineage.parquet").to_pylist()[0]
    assert meta.machine_annotation_tools == [f"{keys.OFFLINE_DIARIZATION}: sha256 {rec['diarizer_sha256']}"]
    assert re.match(r"Built by the rescue pipeline at git commit [0-9a-f]{40}", meta.data_preprocessing_protocol[0])
    doc = json.loads((release / "croissant.json").read_text())
    assert any(f["contentUrl"] == "lineage.parquet" for f in doc["distribution"])
    assert any(rs["@id"] == "lineage" for rs in doc["recordSet"])
