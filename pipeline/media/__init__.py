"""Media stages, in data-flow order; each module imports only the ones above it in this list.

``manifest`` (batch manifests), ``audio`` (ffprobe/ffmpeg: probe, 16 kHz WAV) and ``subtitles``
(SRT/WebVTT -> cues; the transcript types) -> ``ingest`` (the stage: sha256, WAV, a catalog
line in ``pipeline.catalog``) -> ``transcribe`` (subtitles or WhisperX) -> ``rttm`` (turns,
RTTM, DER) -> ``assign`` (word/cue -> speaker) and ``refine`` (silence cut, re-clustering by
voice print) -> ``voices`` (enrolled voice prints) -> ``diarize`` (the pyannote stage, speakers
named by voice; ``vad`` is the voice-activity check it runs first) -> ``voice_labels`` (the
label rows carry per diarized voice, the voice table, renaming rows once a voice is named) ->
``turns`` (the segmenter: draft rows). ``dvector`` is the d-vector voice model, ``speedups``
what ``diarize`` applies to every pyannote pipeline it loads, ``models`` the offline builder
of the model directories production loads.

Stage entry points, shared by the CLI and the flows: ``ingest.ingest_entry``,
``transcribe.transcribe_stage``, ``diarize.diarize_stage`` / ``diarize.diarize_file``,
``turns.segment_stage``. Each takes the :class:`pipeline.paths.DataRoot` its caller built once;
those after ingest take the sample's :class:`pipeline.catalog.Ingested` record (ingest returns
it) and never read the catalog. The caller built and checked the root once
(``pipeline.store.prepare_data_root``: the run's one writability probe); a stage only makes the
private areas it writes (``pipeline.store.private_areas``).
"""
