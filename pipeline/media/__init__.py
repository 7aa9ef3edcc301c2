"""Media stages: ingest, transcription, diarization, voices, turns."""
