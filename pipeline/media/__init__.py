"""Media stages, in data-flow order; each module imports only the ones above it in this list.

``ingest`` (manifest, probe, sha256, 16 kHz WAV, catalog) -> ``transcribe`` (subtitles or
WhisperX) -> ``rttm`` (turns, RTTM, DER) -> ``assign`` (word/cue -> speaker) and ``refine``
(silence cut, re-clustering by voice print) -> ``voices`` (enrolled voice prints) ->
``diarize`` (the pyannote stage, speakers named by voice) -> ``turns`` (the segmenter: draft
rows). ``models`` holds the model directories production loads (the offline diarization
pipeline). Stage entry points, shared by the CLI and the flows: ``ingest.ingest_entry``,
``transcribe.transcribe_stage``, ``diarize.diarize_stage`` / ``diarize.diarize_file``,
``turns.segment_stage``.
"""
