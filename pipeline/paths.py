"""The data root: one typed map of every artifact under it, and the sample-id grammar.

Every path under the data root comes from :class:`DataRoot`; no other module joins segments
under it. Every path it returns lies inside the root: ids that become file names (sample ids,
round names, annotator slugs, versions, voice names) are checked against their grammar first,
and the result is checked again against the resolved root (a symlink inside the root that
points out of it is refused too).

Layout::

    catalog.parquet                          the ingest catalog (one line per sample_id)
    catalog.lock                             held while the catalog is updated
    media/<sha256>.wav                       16 kHz mono audio, content addressed
    subtitles/<sha256>/<name>                copies of the operator's subtitle files
    transcripts/<sample_id>.json             transcripts (subtitles or WhisperX)
    diarization/<sample_id>.rttm             who spoke when
    drafts/<sample_id>.parquet               draft rows from the segmenter
    draft-voices/<sample_id>.parquet         the voices of a segmented interview (name each voice once)
    keys/<stage>/<sample_id>.json            what made a media stage's result: its key and the key's parts
    keys/digests.json                        file digests by path, size and mtime (models, videos)
    work/{samples,rows}.parquet              interviews in annotation (drafts, then each round's gold)
    corpus/{samples,rows}.parquet            the corpus: imported samples and finished gold samples
    annotation/exports/<round>/<scenario>/<annotator>/<sha>.json   raw Label Studio exports
    annotation/exports/<round>/<scenario>/<annotator>/<sha>.predictions.json   what that export
                                             names by id only: the project's predictions, annotators
    annotation/labels/<round>.parquet        the long label table of a round (+ .problems)
    annotation/labels/<round>.acceptance.parquet  what annotators did with the pre-annotation
    annotation/labels/<round>.agreement/     the agreement report of a round
    annotation/admitted.json                 what each interview's drafts were when it entered annotation
    annotation/pushed/<round>.json           which samples each annotator's projects were given (and the
                                             answered tasks ``--redraft`` replaced)
    annotation/sync/<round>.push.json        what the last push saw on each desk (a push again with
                                             nothing new writes nothing); .pull.json: the same for pulls
    annotation/ledger/<round>.json           where each annotation was first seen (a moved one is reported)
    annotation/locks/<round>.lock            held while a round is pushed
    annotation/adjudications/<round>.parquet the adjudicator's answers
    annotation/gates/<round>.json            agreement gate (+ <round>.override.json)
    annotation/gold/                         gold provenance, violations, summary
    reports/                                 import reports
    releases/<version>/                      immutable releases
    voices/<name>.json                       enrolled voice prints (a name with spaces: <slug>-<hash>.json)
    desks/desks.json                         who has a desk: role and port (+ desks.lock)
    desks/<desk>/label-studio/               a person's own Label Studio: database, secret key, log
    desks/<desk>/files/                      the desk's file root: its own tasks' media only
    desks/<desk>/service.json                the pipeline's service account on that desk
    batches/                                 generated batches (the demo, ``rescue synth batch``)
    stack/                                   the local stack's state (Prefect home, pids, logs)
    prefect-results/                         Prefect's result storage (the resume cache)
    label-studio/                            only in data roots made before desks: the one shared
                                             Label Studio, read by ``rescue label-studio migrate-to-desks``

Sample ids: one to four ``/``-separated segments, each starting with a letter or digit and
then letters, digits, ``.``, ``_`` or ``-`` (at most 200 characters in all), e.g.
``alan_and_evelyn/001_s01e01_ct25_segment04`` or ``family_therapy/smiths/002``. So ``..``,
absolute paths, empty segments, backslashes and control characters are never ids.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from pipeline.config import Settings

_SEGMENT = r"[A-Za-z0-9][A-Za-z0-9._-]*"
SAMPLE_ID_RE = re.compile(rf"{_SEGMENT}(?:/{_SEGMENT}){{0,3}}")
SAMPLE_ID_MAX = 200
NAME_RE = re.compile(rf"{_SEGMENT}")          # one segment: rounds, scenarios, voice names
NAME_MAX = 100
VERSION_RE = re.compile(r"\d+\.\d+\.\d+")
SHA256_RE = re.compile(r"[0-9a-f]{64}")
SAMPLE_ID_GRAMMAR = ("one to four '/'-separated segments of letters, digits, '.', '_' or '-', "
                     f"each starting with a letter or digit, at most {SAMPLE_ID_MAX} characters")


class InvalidId(ValueError):
    """An id that would not stay a plain name inside the data root."""


class OutsideDataRoot(ValueError):
    """A path that resolves outside the data root (e.g. through a symlink)."""


def _show(value: object) -> str:
    return repr(value) if isinstance(value, str) else f"{type(value).__name__} {value!r}"


def check_sample_id(sample_id: object) -> str:
    """Return ``sample_id`` if it follows the grammar, else raise :class:`InvalidId` naming it."""
    if not isinstance(sample_id, str) or not sample_id:
        raise InvalidId(f"sample id {_show(sample_id)}: must be a non-empty string ({SAMPLE_ID_GRAMMAR})")
    if len(sample_id) > SAMPLE_ID_MAX or not SAMPLE_ID_RE.fullmatch(sample_id):
        raise InvalidId(f"sample id {sample_id!r} is not allowed: {SAMPLE_ID_GRAMMAR}")
    return sample_id


def check_name(value: object, what: str = "name") -> str:
    """A single path segment (round, scenario, voice name, annotator slug)."""
    if not isinstance(value, str) or not value or len(value) > NAME_MAX or not NAME_RE.fullmatch(value):
        raise InvalidId(f"{what} {_show(value)} is not allowed: letters, digits, '.', '_' or '-', "
                        f"starting with a letter or digit, at most {NAME_MAX} characters")
    return value


def check_version(version: object) -> str:
    if not isinstance(version, str) or not VERSION_RE.fullmatch(version):
        raise InvalidId(f"release version {_show(version)} is not allowed: use X.Y.Z (e.g. 1.0.0)")
    return version


def slug(text: str) -> str:
    """A file-name-safe, still readable form of free text such as an e-mail address."""
    out = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._-")[:NAME_MAX]
    return out or "_"


def _relative_parts(relative: str) -> list[str]:
    """The segments of a plain relative POSIX path (no absolute path, '.', '..' or NUL)."""
    if not isinstance(relative, str) or not relative or relative.startswith("/") or "\\" in relative \
            or "\x00" in relative or any(p in ("", ".", "..") for p in relative.split("/")):
        raise InvalidId(f"stored path {relative!r} is not a plain relative path inside the data root")
    return relative.split("/")


@dataclass(frozen=True)
class DataRoot:
    """The data root (``--data-root``, else ``$RESCUE_DATA_ROOT``, else ``./data``). Built once per
    command or flow run, by its entry point, and passed down: every library function that takes a
    data root takes this value and builds none."""

    root: Path

    def __init__(self, root: str | os.PathLike) -> None:
        if isinstance(root, DataRoot):
            root = root.root
        if isinstance(root, str) and ("\x00" in root or not root.strip()):
            raise InvalidId(f"data root {root!r} is not a usable path")
        object.__setattr__(self, "root", Path(root).expanduser().absolute())

    @classmethod
    def from_env(cls, explicit: str | os.PathLike | None = None) -> "DataRoot":
        return cls(Settings.from_env(explicit).data_root)

    def __fspath__(self) -> str:
        return str(self.root)

    def __str__(self) -> str:
        return str(self.root)

    # --- the one join -----------------------------------------------------------------
    def _inside(self, *parts: str) -> Path:
        path = self.root.joinpath(*parts)
        real_root = self.root.resolve()
        real = path.resolve()  # follows symlinks that exist; the rest is taken as written
        if real != real_root and real_root not in real.parents:
            raise OutsideDataRoot(f"{path} resolves to {real}, outside the data root {real_root}")
        return path

    def relative(self, path: str | os.PathLike) -> str:
        """``path`` as stored in tables (POSIX, relative to the root); refuses paths outside."""
        path = Path(path)
        full = path if path.is_absolute() else self.root / path
        real_root = self.root.resolve()
        real = full.resolve()
        if real_root not in real.parents:
            raise OutsideDataRoot(f"{path} is not inside the data root {real_root}")
        return real.relative_to(real_root).as_posix()

    def resolve(self, relative: str) -> Path:
        """A path stored relative to the root (e.g. the catalog's ``audio_path``) -> a full path."""
        return self._inside(*_relative_parts(relative))

    # --- ingest -----------------------------------------------------------------------
    def catalog(self) -> Path:
        return self._inside("catalog.parquet")

    def catalog_lock(self) -> Path:
        """The lock file every catalog update holds (``fcntl.flock``: across threads and processes)."""
        return self._inside("catalog.lock")

    def media_dir(self) -> Path:
        return self._inside("media")

    def media(self, sha256: str) -> Path:
        if not SHA256_RE.fullmatch(sha256 or ""):
            raise InvalidId(f"media digest {sha256!r} is not a sha256 hex digest")
        return self._inside("media", f"{sha256}.wav")

    def subtitles(self, sha256: str, name: str) -> Path:
        if not SHA256_RE.fullmatch(sha256 or ""):
            raise InvalidId(f"subtitle digest {sha256!r} is not a sha256 hex digest")
        return self._inside("subtitles", sha256, check_name(name, "subtitle file name"))

    # --- per-sample work in progress ----------------------------------------------------
    def transcript(self, sample_id: str) -> Path:
        return self._inside("transcripts", f"{check_sample_id(sample_id)}.json")

    def rttm(self, sample_id: str) -> Path:
        return self._inside("diarization", f"{check_sample_id(sample_id)}.rttm")

    def drafts_dir(self) -> Path:
        return self._inside("drafts")

    def drafts(self, sample_id: str) -> Path:
        return self._inside("drafts", f"{check_sample_id(sample_id)}.parquet")

    def draft_voices(self, sample_id: str) -> Path:
        return self._inside("draft-voices", f"{check_sample_id(sample_id)}.parquet")

    def result_key(self, stage: str, sample_id: str) -> Path:
        """What made a media stage's result (``pipeline.lineage``): its key, the key's parts and why
        it was last recomputed."""
        return self._inside("keys", check_name(stage, "stage"), f"{check_sample_id(sample_id)}.json")

    def digest_cache(self) -> Path:
        """File digests by path, size and modification time (``pipeline.lineage.DigestCache``)."""
        return self._inside("keys", "digests.json")

    # --- interviews in annotation, and the corpus ---------------------------------------
    def work_dir(self) -> Path:
        return self._inside("work")

    def corpus_dir(self) -> Path:
        return self._inside("corpus")

    # --- annotation rounds ------------------------------------------------------------
    def annotation_dir(self) -> Path:
        return self._inside("annotation")

    def labels(self, round_name: str) -> Path:
        return self._inside("annotation", "labels", f"{check_name(round_name, 'round')}.parquet")

    def label_problems(self, round_name: str) -> Path:
        return self._inside("annotation", "labels", f"{check_name(round_name, 'round')}.problems.parquet")

    def acceptance(self, round_name: str) -> Path:
        """Per (sample, row, annotator, field): kept, changed, cleared or added against the
        pre-annotation (:mod:`pipeline.annotation.acceptance`); written by the pull."""
        return self._inside("annotation", "labels", f"{check_name(round_name, 'round')}.acceptance.parquet")

    def agreement_report_dir(self, round_name: str) -> Path:
        return self._inside("annotation", "labels", f"{check_name(round_name, 'round')}.agreement")

    def export(self, round_name: str, scenario: str, annotator: str, sha256: str) -> Path:
        if not SHA256_RE.fullmatch(sha256 or ""):
            raise InvalidId(f"export digest {sha256!r} is not a sha256 hex digest")
        return self._inside("annotation", "exports", check_name(round_name, "round"),
                            check_name(scenario, "scenario"), slug(annotator), f"{sha256}.json")

    def export_predictions(self, round_name: str, scenario: str, annotator: str, export_sha256: str) -> Path:
        """Beside the export ``<sha>.json``: ``<sha>.predictions.json``, what that export names by
        id only (the project's predictions, the annotators' e-mails), taken with it and written once
        (:func:`pipeline.annotation.acceptance.archive_predictions`)."""
        export = self.export(round_name, scenario, annotator, export_sha256)
        return self._inside(*export.parent.relative_to(self.root).parts, f"{export_sha256}.predictions.json")

    def exports_dir(self, round_name: str) -> Path:
        """``annotation/exports/<round>``: every archived export of a round (a rebuild reads them)."""
        return self._inside("annotation", "exports", check_name(round_name, "round"))

    def push_lock(self, round_name: str) -> Path:
        """Held (``fcntl.flock``) around a round's project creation and task import (one host)."""
        return self._inside("annotation", "locks", f"{check_name(round_name, 'round')}.lock")

    def pushed(self, round_name: str) -> Path:
        """What was pushed: ``{"<scenario>/<annotator>": [sample_id, ...]}`` (pull checks it)."""
        return self._inside("annotation", "pushed", f"{check_name(round_name, 'round')}.json")

    def annotation_ledger(self, round_name: str) -> Path:
        """Where each annotation was first seen (task and author), per desk: a moved one is reported."""
        return self._inside("annotation", "ledger", f"{check_name(round_name, 'round')}.json")

    def adjudications(self, round_name: str) -> Path:
        return self._inside("annotation", "adjudications", f"{check_name(round_name, 'round')}.parquet")

    def gates_dir(self) -> Path:
        return self._inside("annotation", "gates")

    def gate(self, round_name: str) -> Path:
        return self._inside("annotation", "gates", f"{check_name(round_name, 'round')}.json")

    def gate_override(self, round_name: str) -> Path:
        return self._inside("annotation", "gates", f"{check_name(round_name, 'round')}.override.json")

    def gold_dir(self) -> Path:
        return self._inside("annotation", "gold")

    # --- reports, releases, voices, local services ---------------------------------------
    def reports_dir(self) -> Path:
        return self._inside("reports")

    def import_report(self, source_sha256: str) -> Path:
        if not re.fullmatch(r"[0-9a-f]{12,64}", source_sha256 or ""):
            raise InvalidId(f"source digest {source_sha256!r} is not a hex digest")
        return self._inside("reports", f"import-{source_sha256[:12]}-violations.parquet")

    def releases_dir(self) -> Path:
        return self._inside("releases")

    def release(self, version: str) -> Path:
        return self._inside("releases", check_version(version))

    def voices_dir(self) -> Path:
        return self._inside("voices")

    def voice(self, name: str) -> Path:
        """``voices/<name>.json``; a name that is no plain file name (a person's name with a space)
        is stored as ``<slug>-<first 8 hex of its sha256>.json`` (the file itself holds the name)."""
        try:
            stem = check_name(name, "voice name")
        except InvalidId:
            if not isinstance(name, str) or not name.strip() or any(ord(c) < 32 for c in name):
                raise
            stem = f"{slug(name)}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
        return self._inside("voices", f"{stem}.json")

    def label_studio_dir(self) -> Path:
        """The single shared Label Studio of data roots made before desks (read by the migration only)."""
        return self._inside("label-studio")

    def label_studio_upload(self, name: str) -> Path:
        """A file uploaded to the shared Label Studio (its ``media/`` folder; the migration copies them)."""
        return self._inside("label-studio", "media", *_relative_parts(name))

    # --- desks: one Label Studio per person (pipeline.labelstudio.desks) ------------------
    def desks_dir(self) -> Path:
        return self._inside("desks")

    def desks_registry(self) -> Path:
        """Who has a desk, their role and port (owner-only)."""
        return self._inside("desks", "desks.json")

    def desks_lock(self) -> Path:
        return self._inside("desks", "desks.lock")

    def desk_dir(self, desk_slug: str) -> Path:
        return self._inside("desks", check_name(desk_slug, "desk"))

    def desk_label_studio_dir(self, desk_slug: str) -> Path:
        """The desk's own Label Studio data dir: its database, SECRET_KEY (.env), log."""
        return self._inside("desks", check_name(desk_slug, "desk"), "label-studio")

    def desk_label_studio_upload(self, desk_slug: str, name: str) -> Path:
        """A file uploaded to a desk's Label Studio (its data dir's ``media/`` folder)."""
        return self._inside("desks", check_name(desk_slug, "desk"), "label-studio", "media", *_relative_parts(name))

    def desk_files(self, desk_slug: str) -> Path:
        """The desk's file root (Label Studio's local-files document root): links to its own tasks' media only."""
        return self._inside("desks", check_name(desk_slug, "desk"), "files")

    def desk_file(self, desk_slug: str, relative: str) -> Path:
        """``relative`` (a path stored relative to the data root, e.g. ``media/<sha>.wav``) inside
        the desk's file root; refused where it would resolve outside that folder."""
        files = self.desk_files(desk_slug)
        path = self._inside("desks", check_name(desk_slug, "desk"), "files", *_relative_parts(relative))
        if files.resolve() not in path.resolve().parents:
            raise OutsideDataRoot(f"{path} resolves to {path.resolve()}, outside the desk's file root {files}")
        return path

    def desk_service(self, desk_slug: str) -> Path:
        """The desk's service account (e-mail, password, API token; owner-only), outside its file root."""
        return self._inside("desks", check_name(desk_slug, "desk"), "service.json")

    def stack_dir(self) -> Path:
        return self._inside("stack")

    def prefect_results(self) -> Path:
        return self._inside("prefect-results")

    def batches_dir(self) -> Path:
        """Where the demo writes its generated batches."""
        return self._inside("batches")
