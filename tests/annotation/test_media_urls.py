"""The Audio player's URL of each sample comes from the ingest catalog (CLI and flow alike)."""
from __future__ import annotations

from pipeline import schemas
from pipeline.catalog import write_catalog
from pipeline.annotation.push import catalog_media_urls
from pipeline.paths import DataRoot


def _entry(sample_id: str, status: str, audio_path: str | None) -> dict:
    row = {name: None for name in schemas.CATALOG.names}
    row.update(sample_id=sample_id, scenario="couple", source_name=f"{sample_id.split('/')[-1]}.mp4",
               sha256="0" * 64, status=status, audio_path=audio_path, participants=["Ann", "Bo"])
    return row


def test_urls_point_at_extracted_audio_and_skip_quarantined(tmp_path):
    write_catalog(DataRoot(tmp_path), {
        "c/ok": _entry("c/ok", "done", "media/abc.wav"),
        "c/bad": _entry("c/bad", "quarantined", None),
    })
    url = catalog_media_urls(DataRoot(tmp_path))
    assert url({"sample_id": "c/ok"}) == "/data/local-files/?d=media/abc.wav"
    assert url({"sample_id": "c/bad"}) == "" and url({"sample_id": "c/unknown"}) == ""
