"""The schema of every table the pipeline writes: one place, pyarrow types.

Rows follow the RESCUE row schema (spec §1.3) with nested lists stored as Parquet
``list<struct>``. One deliberate difference from the published JSONL: the relation label
lives on the therapist row it annotates (``relation_cycle_state`` / ``_reason`` /
``_evidence_rows``, the names the paper's RPP script reads). The release's shifted copy on
the preceding row (``relation_pattern*``) is derived on export (``pipeline.benchmark.paper_format``).
Evidence rows keep the release's 0-based positions.
"""
from __future__ import annotations

import pyarrow as pa

STR = pa.string()
STR_LIST = pa.list_(pa.string())

PERSON_DESCRIPTION = pa.struct([("person", STR), ("description", STR)])
BACKGROUND_DIALOGUE = pa.struct([("speaker", STR), ("target", STR_LIST), ("content", STR)])
INTERACTION_BEHAVIOR = pa.struct([("initiator", STR), ("target", STR_LIST), ("description", STR)])
INTERNAL_EMOTION = pa.struct([("person", STR), ("emotion_description", STR), ("intensity", pa.int64())])
VIEWPOINT = pa.struct([("source", STR), ("target", STR), ("viewpoint", STR), ("attitude", STR)])
SUPPORT_STRATEGY = pa.struct(
    [("provider", STR), ("target", STR_LIST), ("strategy_type", STR), ("strategy_content", STR)]
)

# The 15 keys every row carries in the release, in release order (V1).
BASE_ROW_FIELDS: list[pa.Field] = [
    pa.field("start_time", pa.float64(), nullable=False),
    pa.field("end_time", pa.float64(), nullable=False),
    pa.field("primary_speaker", STR, nullable=False),
    pa.field("target", STR_LIST),
    pa.field("dialogue_cleaned", STR),
    pa.field("utterance_type", STR),
    pa.field("background_dialogue", pa.list_(BACKGROUND_DIALOGUE)),
    pa.field("tone_of_voice", STR),
    pa.field("body_posture", pa.list_(PERSON_DESCRIPTION)),
    pa.field("facial_expressions", pa.list_(PERSON_DESCRIPTION)),
    pa.field("self_directed_behavior", pa.list_(PERSON_DESCRIPTION)),
    pa.field("interaction_behavior", pa.list_(INTERACTION_BEHAVIOR)),
    pa.field("internal_emotion", pa.list_(INTERNAL_EMOTION)),
    pa.field("viewpoints_attitudes", pa.list_(VIEWPOINT)),
    pa.field("support_strategy", pa.list_(SUPPORT_STRATEGY)),
]
BASE_ROW_KEYS: tuple[str, ...] = tuple(f.name for f in BASE_ROW_FIELDS)
LIST_ROW_KEYS: tuple[str, ...] = tuple(
    f.name for f in BASE_ROW_FIELDS if pa.types.is_list(f.type)
)

# Relation annotation on therapist rows; null on client rows (the release omits the key there).
RELATION_FIELDS: list[pa.Field] = [
    pa.field("relation_cycle_state", STR),
    pa.field("relation_cycle_reason", STR),
    pa.field("relation_cycle_evidence_rows", pa.list_(pa.int64())),
]

ROWS = pa.schema(
    [pa.field("sample_id", STR, nullable=False), pa.field("row_index", pa.int64(), nullable=False)]
    + BASE_ROW_FIELDS
    + RELATION_FIELDS
)
ROW_KEYS: tuple[str, ...] = tuple(ROWS.names)

SAMPLES = pa.schema(
    [
        pa.field("sample_id", STR, nullable=False),
        pa.field("scenario", STR, nullable=False),
        pa.field("group_id", STR, nullable=False),  # couple / family directory: the split unit
        pa.field("participants", STR_LIST),
        pa.field("source_file", STR),  # relative, never an absolute path
        pa.field("n_rows", pa.int64()),
        pa.field("duration_s", pa.float64()),  # clip duration when known (V4), else null
    ]
)

# Every task table starts with these, then its inputs, then `label` (the gold).
TASK_KEY_FIELDS: list[pa.Field] = [
    pa.field("sample_id", STR, nullable=False),
    pa.field("scenario", STR, nullable=False),
    pa.field("row_index", pa.int64(), nullable=False),
    pa.field("instance_id", STR, nullable=False),
]

# Draft rows from the turn segmenter before any annotation: the transcript round's input.
DRAFT_ROWS = pa.schema(
    [
        pa.field("sample_id", STR, nullable=False),
        pa.field("row_index", pa.int64(), nullable=False),
        pa.field("start_time", pa.float64(), nullable=False),
        pa.field("end_time", pa.float64(), nullable=False),
        pa.field("primary_speaker", STR, nullable=False),  # a name, or a voice label ("Speaker 1": DRAFT_VOICES)
        pa.field("target", STR_LIST),
        pa.field("dialogue_cleaned", STR),
        pa.field("background_dialogue", pa.list_(BACKGROUND_DIALOGUE)),
    ]
)

# The voices of a segmented interview (pipeline.media.turns): one line per label the draft rows
# carry, so that an annotator names each voice once (turns.apply_voice_names renames every row).
DRAFT_VOICES = pa.schema(
    [
        pa.field("sample_id", STR, nullable=False),
        pa.field("voice", STR, nullable=False),        # the label in the draft rows: "Speaker 1", "Therapist", "Alan"
        pa.field("diarization_speaker", STR),          # the RTTM label behind it (null: named by a subtitle prefix)
        pa.field("named_by", STR),                     # voice (enrolled) | order (manifest hint) | role | subtitles | null
        pa.field("first_rows", pa.list_(pa.int64())),  # row_index of its first rows (up to 3)
        pa.field("sample_start", pa.float64()),        # a few seconds of this voice alone, to listen to
        pa.field("sample_end", pa.float64()),
        pa.field("n_rows", pa.int64()),
        pa.field("speech_s", pa.float64()),            # seconds of speech diarization gives this voice
    ]
)

# The long label table pulled from Label Studio and consumed by agreement/gold.
# One line per (round, sample, row, annotator, field); `value` is JSON text so that every
# field type (choice, list of names, number, nested records) shares one column.
LABELS = pa.schema(
    [
        pa.field("round", STR, nullable=False),
        pa.field("sample_id", STR, nullable=False),
        pa.field("scenario", STR),  # of the project the task came from; null in older tables
        pa.field("row_index", pa.int64(), nullable=False),
        pa.field("annotator", STR, nullable=False),
        pa.field("field", STR, nullable=False),
        pa.field("value", STR),  # JSON
        pa.field("annotation_id", pa.int64()),
        pa.field("lead_time_s", pa.float64()),
        pa.field("created_at", STR),
        pa.field("updated_at", STR),
    ]
)

# Problems found when validating pulled annotations against their round: a field with a
# problem has no line in LABELS. row_index/field are null for task-level problems (e.g. skipped).
LABEL_PROBLEMS = pa.schema(
    [
        pa.field("round", STR, nullable=False),
        pa.field("sample_id", STR, nullable=False),
        pa.field("row_index", pa.int64()),
        pa.field("annotator", STR, nullable=False),
        pa.field("field", STR),
        pa.field("problem", STR, nullable=False),
        pa.field("value", STR),  # JSON of the offending value, when there is one
    ]
)

# Media catalog: one line per ingested video.
CATALOG = pa.schema(
    [
        pa.field("sample_id", STR, nullable=False),
        pa.field("scenario", STR, nullable=False),
        pa.field("source_name", STR, nullable=False),  # file name inside the batch, no absolute path
        pa.field("sha256", STR, nullable=False),
        pa.field("duration_s", pa.float64()),
        pa.field("audio_path", STR),  # relative to the data root
        pa.field("status", STR, nullable=False),  # done | quarantined
        pa.field("reason", STR),
        pa.field("participants", STR_LIST),  # clients in speaking order (manifest); Therapist implicit
        pa.field("subtitle_path", STR),  # relative to the data root, null when none
        # ffprobe's facts about the source (null when quarantined before probing)
        pa.field("media_format", STR),
        pa.field("audio_codec", STR),
        pa.field("source_sample_rate", pa.int32()),
        pa.field("source_channels", pa.int32()),
        pa.field("has_video", pa.bool_()),
        # the manifest says participants are in speaking order (a naming hint for the segmenter); null: no
        pa.field("speaking_order", pa.bool_()),
        # what generated this interview (the batch manifest's synthetic column); null: a recording
        pa.field("synthetic", STR),
    ]
)

VIOLATIONS = pa.schema(
    [
        pa.field("sample_id", STR),
        pa.field("row_index", pa.int64()),
        pa.field("rule", STR, nullable=False),
        pa.field("message", STR, nullable=False),
    ]
)


def empty_table(schema: pa.Schema) -> pa.Table:
    return schema.empty_table()


# ==== Task tables (pipeline.benchmark.tasks) and releases (pipeline.benchmark.release) ===================
# Convention: columns whose name starts with ``label`` hold gold; every other column is a
# key, metadata known before the turn, or model input. Context rows carry input fields only
# (never internal_emotion, viewpoints_attitudes, support_strategy, relation_*, utterance_type).

# The audible/visible cue fields of a row: model input in every modality (types from BASE_ROW_FIELDS).
_CUE_FIELDS = [f for f in BASE_ROW_FIELDS if f.name in (
    "background_dialogue", "tone_of_voice", "body_posture", "facial_expressions", "self_directed_behavior",
    "interaction_behavior")]

CONTEXT_ROW = pa.struct(
    [
        pa.field("row_index", pa.int64()),
        pa.field("timestamp", STR),  # "%.3f-%.3f" % (start_time, end_time), as the paper's scripts
        pa.field("primary_speaker", STR),
        pa.field("target", STR_LIST),
        pa.field("dialogue_cleaned", STR),
        *_CUE_FIELDS,
    ]
)
CONTEXT_ROW_KEYS: tuple[str, ...] = tuple(f.name for f in CONTEXT_ROW)
CONTEXT = pa.list_(CONTEXT_ROW)

_TASK_KEYS = list(TASK_KEY_FIELDS)
# The current (checkpoint) row of ER/VP, flat as in the paper's er.jsonl / vp.jsonl.
_CURRENT_ROW = [
    pa.field("timestamp", STR),
    pa.field("speaker", STR),
    pa.field("target", STR_LIST),
    pa.field("dialogue", STR),
    *_CUE_FIELDS,
]

ITP = pa.schema(
    _TASK_KEYS
    + [
        pa.field("participants", STR_LIST),
        pa.field("decision_after_row", CONTEXT_ROW),  # the last row before the decision
        pa.field("prior_context", CONTEXT),  # ends WITH the decision row (paper's scripts)
        pa.field("label", STR),  # yes | no
        pa.field("label_boundary_type", STR),  # therapist_entry | same_speaker_continuation | non_therapist_exchange
    ]
)
RPP = pa.schema(
    _TASK_KEYS
    + [
        pa.field("turn_id", STR),  # the paper's "<file stem>__row<k>" (not unique across groups)
        pa.field("target_primary_speaker", STR),
        pa.field("participants", STR_LIST),
        pa.field("candidate_relation_labels", STR_LIST),
        pa.field("prior_context", CONTEXT),
        pa.field("label", STR),
        pa.field("label_reason", STR),
        pa.field("label_evidence_rows", pa.list_(pa.int64())),
    ]
)
STP = pa.schema(
    _TASK_KEYS
    + [
        pa.field("turn_id", STR),
        pa.field("target_primary_speaker", STR),
        pa.field("participants", STR_LIST),
        pa.field("candidate_target_labels", STR_LIST),
        pa.field("prior_context", CONTEXT),
        pa.field("label", STR),
        pa.field("label_source", STR),  # support_strategy | row_target_fallback
    ]
)
SSP = pa.schema(
    _TASK_KEYS
    + [
        pa.field("turn_id", STR),
        pa.field("participants", STR_LIST),
        pa.field("known_support_target", STR),  # given to the model by design (paper)
        pa.field("candidate_strategy_labels", STR_LIST),
        pa.field("target_internal_emotion", pa.list_(INTERNAL_EMOTION)),  # null unless enabled
        pa.field("prior_context", CONTEXT),
        pa.field("label", STR),
    ]
)
ER = pa.schema(
    _TASK_KEYS
    + [pa.field("group_id", STR)]
    + _CURRENT_ROW
    + [
        pa.field("prior_context", CONTEXT),
        pa.field("label", STR),  # gold emotion description
        pa.field("label_intensity", pa.int64()),  # gold intensity 0..10
    ]
)
VP = pa.schema(
    _TASK_KEYS
    + [pa.field("group_id", STR), pa.field("participants", STR_LIST)]
    + _CURRENT_ROW
    + [
        pa.field("prior_context", CONTEXT),
        pa.field("label", pa.list_(VIEWPOINT)),  # all speaker-matched gold viewpoints
    ]
)
TASK_SCHEMAS: dict[str, pa.Schema] = {"itp": ITP, "rpp": RPP, "stp": STP, "ssp": SSP, "er": ER, "vp": VP}
# Release configs in card order: the two row-level tables, then the six tasks.
RELEASE_CONFIGS: tuple[str, ...] = ("samples", "rows", *TASK_SCHEMAS)
# ==== end of task-table block =========================================================
