"""The turn segmenter on hand-made units: speaker changes, pauses, backchannels, long rows, overlaps."""
from __future__ import annotations

from pipeline.media.rttm import Turn
from pipeline.media.transcribe import Transcript, Unit
from pipeline.media.turns import SegmenterConfig, segment, segment_units
from pipeline.media.voice_labels import default_speaking_order, speaker_names


def U(s, e, text, who):
    return Unit(s, e, text, who)


def rows_of(units, **cfg):
    return [(r.speaker, " ".join(u.text for u in r.units), r.background)
            for r in segment_units(units, SegmenterConfig(**cfg))]


def test_speaker_change_and_long_pause_start_rows():
    units = [U(0, 1, "Hi.", "T"), U(1.2, 3, "Hello there.", "A"), U(3.5, 5, "I am fine.", "A"),
             U(8, 9, "Also this.", "A")]
    assert [r[:2] for r in rows_of(units, max_pause_s=1.5)] == [
        ("T", "Hi."), ("A", "Hello there. I am fine."), ("A", "Also this.")]


def test_backchannel_inside_a_turn_becomes_background():
    units = [U(0, 3, "I tried to explain it.", "A"), U(3.2, 3.8, "Yeah, yeah.", "T"),
             U(4.0, 6, "But he would not listen.", "A"), U(6.5, 8, "What happened then?", "T")]
    rows = rows_of(units)
    assert rows[0] == ("A", "I tried to explain it. But he would not listen.",
                       [{"speaker": "T", "target": ["A"], "content": "Yeah, yeah."}])
    assert rows[1][:2] == ("T", "What happened then?")


def test_short_answer_to_a_question_stays_a_row():
    units = [U(0, 2, "Are you okay?", "T"), U(2.3, 2.8, "Yes.", "A"), U(3.2, 5, "Good, tell me more.", "T")]
    assert [r[:2] for r in rows_of(units)] == [("T", "Are you okay?"), ("A", "Yes."), ("T", "Good, tell me more.")]


def test_long_row_splits_at_sentence_end():
    units = [U(i * 4.0, i * 4.0 + 3.8, f"Sentence {i}." if i % 2 else f"clause {i}", "A") for i in range(12)]
    rows = segment_units(units, SegmenterConfig(max_row_s=20.0))
    assert len(rows) > 1
    for r in rows[:-1]:
        assert r.units[-1].text.endswith(".")
        assert r.end - r.start <= 20.0 + 4.0


def test_overlaps_are_ordered_deterministically():
    units = [U(0, 3, "First speaker talks.", "A"), U(2.6, 5, "I cut in here.", "B"), U(2.6, 4, "Me too now.", "C")]
    a = rows_of(units, backchannel_max_words=0)
    b = rows_of(list(reversed(units)), backchannel_max_words=0)
    assert a == b and [r[0] for r in a] == ["A", "C", "B"]


def test_a_stray_fragment_does_not_reorder_speakers():
    turns = [Turn(0.0, 0.2, "SPEAKER_01"), Turn(0.3, 3, "SPEAKER_00"), Turn(3.5, 6, "SPEAKER_01")]
    assert speaker_names(turns, ["Therapist", "Alan"]) == {"SPEAKER_00": "Therapist", "SPEAKER_01": "Alan"}


def test_speaker_names_follow_speaking_order():
    turns = [Turn(0, 1, "SPEAKER_02"), Turn(1, 2, "SPEAKER_00"), Turn(2, 3, "SPEAKER_01"), Turn(4, 5, "SPEAKER_03")]
    assert speaker_names(turns, ["Therapist", "Alan", "Evelyn"]) == {
        "SPEAKER_02": "Therapist", "SPEAKER_00": "Alan", "SPEAKER_01": "Evelyn", "SPEAKER_03": "SPEAKER_03"}


def test_segment_builds_draft_rows_with_names_targets_and_prefix_speakers():
    turns = [Turn(0, 2, "SPEAKER_01"), Turn(2.2, 6, "SPEAKER_00"), Turn(6.3, 8, "SPEAKER_01")]
    tr = Transcript("cue", [Unit(0.1, 1.9, "What brings you here?"), Unit(2.3, 5.8, "We fight a lot."),
                            Unit(6.4, 7.9, "Tell me more.", speaker="Evelyn")])
    # with the manifest's speaking-order hint: voices named by the order (therapist first)
    table = segment("g/s1", tr, turns, "couple", ["Alan", "Evelyn"],
                    speaking_order=default_speaking_order(["Alan", "Evelyn"]))
    rows = table.to_pylist()
    assert [(r["row_index"], r["primary_speaker"], r["target"]) for r in rows] == [
        (1, "Therapist", ["Couple"]), (2, "Alan", ["Therapist"]), (3, "Evelyn", ["Alan"])]
    assert rows[1]["start_time"] == 2.3 and rows[1]["end_time"] == 5.8
    assert table.schema.names[:3] == ["sample_id", "row_index", "start_time"]
    # without the hint: the therapist by role (opens, asks), the other voice neutral, prefixes kept
    rows = segment("g/s1", tr, turns, "couple", ["Alan", "Evelyn"]).to_pylist()
    assert [(r["primary_speaker"], r["target"]) for r in rows] == [
        ("Therapist", ["Couple"]), ("Speaker 1", ["Therapist"]), ("Evelyn", ["Speaker 1"])]


def test_rescue_segment_speaking_order_option_overrides_the_manifest_column(tmp_path):
    """`rescue segment --speaking-order yes|no` mirrors the manifest's column; default: the column."""
    import json

    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from pipeline.cli import app
    from pipeline.catalog import catalog_entry, record_catalog
    from pipeline.media.rttm import write_rttm
    from pipeline.paths import DataRoot
    from pipeline.store import atomic_write_text

    spoken = [("SPEAKER_01", "What brings you both here?"), ("SPEAKER_00", "We argue about money."),
              ("SPEAKER_01", "Who worries more?"), ("SPEAKER_02", "I do, all the time.")]
    cues = [Unit(i * 3.0, i * 3.0 + 2.5, text) for i, (_, text) in enumerate(spoken)]
    dia = [Turn(i * 3.0, i * 3.0 + 2.5, who) for i, (who, _) in enumerate(spoken)]
    root = DataRoot(tmp_path)
    record_catalog(root, {"sample_id": "c/one", "scenario": "couple", "source_name": "x.mp4", "sha256": "0" * 64,
                          "duration_s": 12.0, "audio_path": None, "status": "done",
                          "participants": ["Ann", "Ben"], "speaking_order": None})
    atomic_write_text(root.transcript("c/one"), json.dumps(Transcript("cue", cues).to_dict()))
    write_rttm(dia, root.rttm("c/one"))

    def speakers(*options):
        out = CliRunner().invoke(app, ["segment", "c/one", "--data-root", str(tmp_path), *options])
        assert out.exit_code == 0, out.output
        return [r["primary_speaker"] for r in pq.read_table(root.drafts("c/one")).to_pylist()]

    assert speakers() == ["Therapist", "Speaker 1", "Therapist", "Speaker 2"]  # no column: neutral labels
    assert speakers("--speaking-order", "yes") == ["Therapist", "Ann", "Therapist", "Ben"]
    assert speakers("--speaking-order", "no") == ["Therapist", "Speaker 1", "Therapist", "Speaker 2"]
    record_catalog(root, {**catalog_entry(root, "c/one"), "speaking_order": True})  # the column says yes
    assert speakers() == ["Therapist", "Ann", "Therapist", "Ben"]
    assert speakers("--speaking-order", "no") == ["Therapist", "Speaker 1", "Therapist", "Speaker 2"]
    bad = CliRunner().invoke(app, ["segment", "c/one", "--data-root", str(tmp_path), "--speaking-order", "maybe"])
    assert bad.exit_code == 2 and "--speaking-order" in bad.output and "'maybe'" in bad.output
