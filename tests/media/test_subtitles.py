"""SRT/VTT import: tolerant of real-world files, clear errors for what cannot be read."""
from __future__ import annotations

import pytest

from pipeline.media.transcribe import SubtitleError, parse_subtitles

SRT = """1
00:00:01,000 --> 00:00:03,500
JOSH: I never said that.

2
00:00:03,200 --> 00:00:04,000
[Therapist] Okay.

3
00:01:40,000 --> 00:01:42,250
<i>It was</i> a long
week, honestly.

4
00:01:43,000 --> 00:01:44,000
[laughs]

5
00:01:44,500 --> 00:01:45,000
- Yes.
- No.
"""


def test_srt_with_bom_crlf_prefixes_overlap(tmp_path):
    path = tmp_path / "a.srt"
    path.write_bytes(b"\xef\xbb\xbf" + SRT.replace("\n", "\r\n").encode())
    tr = parse_subtitles(path, duration_s=200.0, names=["Therapist", "Josh", "Mia"])
    texts = [(u.start, u.end, u.speaker, u.text) for u in tr.units]
    assert texts[0] == (1.0, 3.5, "Josh", "I never said that.")
    assert texts[1] == (3.2, 4.0, "Therapist", "Okay.")  # overlapping cue kept, in time order
    assert texts[2] == (100.0, 102.25, None, "It was a long week, honestly.")  # minutes kept, tags gone
    assert [u.text for u in tr.units[3:]] == ["Yes.", "No."]  # "[laughs]" is not speech; dashes split
    assert tr.units[3].start == 104.5 and tr.units[4].end == 105.0 and tr.units[3].end == tr.units[4].start
    assert tr.warnings == []


def test_prefix_that_is_not_a_label_stays_text(tmp_path):
    path = tmp_path / "b.srt"
    path.write_text("1\n00:00:01,000 --> 00:00:02,000\nNote: this stays.\n")
    [u] = parse_subtitles(path, names=["Josh"]).units
    assert u.speaker is None and u.text == "Note: this stays."


def test_vtt(tmp_path):
    path = tmp_path / "c.vtt"
    path.write_text("WEBVTT\n\nNOTE written by hand\n\nintro\n00:01.000 --> 00:02.500 align:start\n"
                    "<v Mia>Hello there.\n\n00:00:03.000 --> 00:00:04.000\nHi.\n")
    tr = parse_subtitles(path)
    assert [(u.start, u.end, u.speaker, u.text) for u in tr.units] == [
        (1.0, 2.5, "Mia", "Hello there."), (3.0, 4.0, None, "Hi.")]


def test_cues_past_the_end_are_clipped_with_a_warning(tmp_path):
    path = tmp_path / "d.srt"
    path.write_text("1\n00:00:08,000 --> 00:00:12,000\nStill talking.\n\n2\n00:00:15,000 --> 00:00:16,000\nGone.\n")
    tr = parse_subtitles(path, duration_s=10.0)
    assert [(u.start, u.end, u.text) for u in tr.units] == [(8.0, 10.0, "Still talking.")]
    assert "d.srt cue 1" in tr.warnings[0] and "clipped" in tr.warnings[0]
    assert "d.srt cue 2" in tr.warnings[1] and "dropped" in tr.warnings[1]


def test_non_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "latin1.srt"
    path.write_bytes("1\n00:00:01,000 --> 00:00:02,000\nCaf\u00e9 ol\u00e9\n".encode("latin-1"))
    with pytest.raises(SubtitleError, match=r"latin1.srt: not UTF-8 text \(byte 0xe9 on line 3\)"):
        parse_subtitles(path)


@pytest.mark.parametrize("body, message", [
    ("1\n00:00:01,000 -> 00:00:02,000\nHi.\n", r"bad.srt cue 1 \(line 1\): no timing line"),
    ("1\n00:00:01,000 --> 00:00:02,000\nHi.\n\n2\n00:00:xx,000 --> 00:00:03,000\nYo.\n",
     r"bad.srt cue 2 \(line 5\): cannot read the timing line"),
    ("1\n00:00:05,000 --> 00:00:02,000\nHi.\n", r"bad.srt cue 1 \(line 1\): ends \(2.000 s\) before it starts"),
])
def test_malformed_srt_names_cue(tmp_path, body, message):
    path = tmp_path / "bad.srt"
    path.write_text(body)
    with pytest.raises(SubtitleError, match=message):
        parse_subtitles(path)
