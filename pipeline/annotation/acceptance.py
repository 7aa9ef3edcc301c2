"""Pre-annotation acceptance: what annotators did with the values a round's prediction pre-filled.

A round is pushed with predictions (:mod:`.push`: the input rows' values - the segmenter's draft
in the transcript round, earlier gold after it - or a model's, :mod:`.prelabel`), and Label
Studio shows them as the form's starting values. No annotation tool reports whether people then
*kept* them, so a model whose drafts anchor annotators looks the same as one that helps. The pull
(:func:`pipeline.annotation.pull.pull_round`) measures it per (sample, row, annotator, field):

* ``kept``: predicted, and the submitted value equals the prediction;
* ``changed``: predicted, and the submitted value differs;
* ``cleared``: predicted, and the annotator left the field empty;
* ``added``: nothing predicted, and the annotator filled the field.

Each pre-filled field is a proposal of its own, which Label Studio takes only once the annotator
accepted it or changed it (:func:`.ls_config.mark_prefilled`): ``kept`` is a proposal accepted as
it was, ``changed`` one edited, field by field, so a row whose speaker was corrected counts its
text and addressee as kept. The proposal mark and the "accept" boxes are no fields (their names
are none of the round's) and count nowhere.

A records field (felt emotions, viewpoints, strategies) counts as a whole (``internal_emotion``)
and part by part (``internal_emotion.person``, ...: slot by slot as the form shows them, by the
raw values, since a pre-filled part of a record alone is no record the parser accepts).

In the transcript round the names given to each voice in its "who is each voice?" block
(:mod:`.voice_naming`) count too, as field ``voice_name`` on no row: a voice pre-named (by role,
the speaking-order hint, an enrolled voice print) kept or renamed, or a neutral voice named.

Both sides go through the pull's own parser (:func:`pipeline.annotation.parse.parse_annotation`,
handed in by the pull, which shares its reading of the annotation with the label table),
so values compare as the label table stores them (choice lists and records as sets: their order
on the form does not matter); a value the parser refuses compares by its raw Label Studio result.
A field counts as filled when any of its controls has a non-empty result ("no strategy" and the
like are choices, so they are filled). Only tasks that carried a prediction count, and only the
annotator's own latest submitted annotation, as in the label table; a windowed sample
(:mod:`.windows`) counts once every window is submitted. The prediction's ``model_version``
(``<round>-v<version>-<source>``, :func:`.push.model_version`) names where the drafts came from.

Label Studio's synchronous export (the archived one) gives predictions and annotators by id
only, so the pull reads each project's predictions with one request (``GET
/api/predictions/?project=``) and archives them, with the e-mails of the user ids the export
names, beside the export (:func:`archive_predictions`, ``DataRoot.export_predictions``: written
once per export state). The table is computed from that pair alone (:func:`measure_archived`),
by the pull and by a rebuild from the archive without Label Studio
(:func:`pipeline.annotation.pull.rebuild_acceptance`, ``rescue annotate acceptance ROUND
--rebuild``), so both give the same lines. The long table goes to ``DataRoot.acceptance(round)``;
:func:`summarize` counts it per source, annotator and field for the agreement report and the
annotation-round run.
"""
from __future__ import annotations

import datetime as dt
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import store
from pipeline.annotation import ls_config, naming, screen, voice_naming
from pipeline.labelstudio.client import LabelStudioClient
from pipeline.annotation.rounds import Round
from pipeline.annotation.windows import stitch_tasks
from pipeline.paths import SHA256_RE, DataRoot

OUTCOMES = ("kept", "changed", "cleared", "added")
SCHEMA = pa.schema([
    ("round", pa.string()), ("scenario", pa.string()), ("sample_id", pa.string()), ("row_index", pa.int64()),
    ("annotator", pa.string()), ("field", pa.string()),
    ("slot", pa.int64()),        # a record's slot on the form for ``<field>.<subfield>`` lines, else null
    ("model_version", pa.string()),
    ("outcome", pa.string()),
    ("predicted", pa.string()),  # JSON of the label-table value (lists sorted); null when none was predicted
    ("value", pa.string()),      # JSON of the submitted value; null when cleared
])
# The pull's parser, :func:`pipeline.annotation.parse.parse_annotation` or a
# :class:`~pipeline.annotation.parse.ParseOnce` (passed in by the pull):
# (round, task data, annotation, annotator) -> (lines, problems).
Parser = Callable[[Round, dict, dict, str], tuple[list[dict], list[dict]]]
_PREDICTOR = "\x00prediction"  # the stand-in author of a prediction while windows are stitched
# The transcript round's "who is each voice?" block (:mod:`.voice_naming`): one line per voice,
# on no row (``row_index`` null), the voice and its name as the values.
VOICE_FIELD = "voice_name"
_VOICE_CHOICE = re.compile(voice_naming.CHOICE_NAME.format(v=r"(\d+)"))
_control = lru_cache(maxsize=1 << 16)(naming.parse_control_name)  # a round's names, met in every task


def project_predictions(client: LabelStudioClient, project_id: int) -> dict[int, list[dict]]:
    """``task id -> [prediction, ...]`` of one project (one request; pages when the server pages)."""
    out: dict[int, list[dict]] = {}
    page = 1
    while True:
        body = client._json("GET", "/api/predictions/", f"list the predictions of project {project_id}",
                            params={"project": project_id, "page": page, "page_size": 1000})
        items = body.get("results", []) if isinstance(body, dict) else (body or [])
        for p in items:
            out.setdefault(p.get("task"), []).append(p)
        if not isinstance(body, dict) or not body.get("next"):
            return out
        page += 1


# Volatile fields of Label Studio's prediction objects ("3 minutes" ago): not archived, so an
# unchanged state gives the same record.
_VOLATILE = ("created_ago",)


def predictions_record(round_name: str, scenario: str, annotator: str, project_id: int, tasks: list[dict],
                       predictions: dict[int, list[dict]], users: dict[int, str]) -> dict:
    """What an export names by id only, as archived beside it: the project's predictions (sorted
    by id) and the e-mail of every user id its annotations name; also whose export it is (the
    archive's folder names are slugs) and when this state was first pulled (a rebuild takes each
    annotator's latest state)."""
    named = {a.get("completed_by") for t in tasks if isinstance(t, dict) for a in t.get("annotations") or []}
    preds = sorted(({k: v for k, v in p.items() if k not in _VOLATILE} for ps in predictions.values() for p in ps),
                   key=lambda p: p.get("id") or 0)
    return {"round": round_name, "scenario": scenario, "annotator": annotator, "project_id": project_id,
            "pulled_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds"),
            "users": {str(i): users[i] for i in sorted(n for n in named if isinstance(n, int) and n in users)},
            "predictions": preds}


def archive_predictions(root: DataRoot, export_path: Path, record: dict) -> tuple[dict, bool]:
    """Write ``record`` beside the archived export ``export_path`` (``<sha>.json``) once, atomically.

    Returns ``(the record as archived, newly written)``: an export state pulled again keeps the
    record of its first pull, and the caller measures from that (the input a rebuild reads).
    """
    sha = Path(export_path).stem
    path = root.export_predictions(record["round"], record["scenario"], record["annotator"], sha)
    if path.exists():
        return json.loads(path.read_bytes()), False
    store.atomic_write_bytes(path, json.dumps(record, sort_keys=True, ensure_ascii=False).encode("utf-8"))
    return record, True


def archived_states(root: DataRoot, round_name: str) -> tuple[list[tuple[Path, dict]], list[Path]]:
    """``([(export path, predictions record), ...] oldest first, [exports without a record])`` of a
    round's archive (exports pulled before predictions were archived have no record)."""
    base = root.exports_dir(round_name)
    pairs, bare = [], []
    for export in sorted(base.glob("*/*/*.json")):
        if not SHA256_RE.fullmatch(export.stem):
            continue  # a predictions record (or anything else that is no export)
        record = export.with_name(f"{export.stem}.predictions.json")
        if record.is_file():
            pairs.append((export, json.loads(record.read_bytes())))
        else:
            bare.append(export)
    pairs.sort(key=lambda pr: (pr[1].get("pulled_at") or "", pr[0].name))
    return pairs, bare


def measure_archived(rnd: Round, tasks: list[dict], record: dict, *, parse: Parser) -> list[dict]:
    """Acceptance lines of one export state from its tasks and its predictions record
    (:func:`predictions_record`): what the pull and a rebuild from the archive both call."""
    return measure_and_stitch(rnd, tasks, record, parse=parse)[0]


def measure_and_stitch(rnd: Round, tasks: list[dict], record: dict, *, parse: Parser,
                       checked: bool = False) -> tuple[list[dict], list[dict], list[tuple[str, str]]]:
    """:func:`measure_archived`'s lines, and the export's tasks stitched as
    :func:`.windows.stitch_tasks` gives them (one task per sample, and its notes), from one
    stitching: the pull needs both. A task or answer not shaped as the push and Label Studio
    make them is left out with a note (:func:`.screen.well_formed`; ``checked``: the caller did
    that already), and a prediction of another shape counts as none."""
    predictions: dict[int, list[dict]] = {}
    for p in record.get("predictions") or []:
        if isinstance(p, dict):
            predictions.setdefault(p.get("task"), []).append(p)
    users = {int(k): v for k, v in (record.get("users") or {}).items()}
    return _measure(rnd, record["scenario"], record["annotator"], tasks, predictions, users, parse, checked)


def _email(completed_by, users: dict[int, str]) -> str | None:
    return completed_by.get("email") if isinstance(completed_by, dict) else users.get(completed_by)


def _own_latest(annotations: Iterable[dict], annotator: str, users: dict[int, str]) -> dict | None:
    """The annotator's latest submitted (not skipped) annotation, chosen as the pull chooses it."""
    live = [a for a in annotations or [] if a.get("completed_by") != _PREDICTOR and not a.get("was_cancelled")
            and _email(a.get("completed_by"), users) in (None, annotator)]
    return max(live, key=lambda a: (a.get("updated_at") or "", a.get("id") or 0)) if live else None


def _shown_prediction(task: dict, predictions: dict[int, list[dict]], annotator: str,
                      users: dict[int, str]) -> dict | None:
    """The prediction the annotator started from: the one their annotation names as its parent,
    else the task's latest (a push replaces predictions only on tasks nobody annotated)."""
    preds = predictions.get(task.get("id")) or []
    if not preds:
        return None
    mine = _own_latest(task.get("annotations"), annotator, users)
    parent = (mine or {}).get("parent_prediction")
    return next((p for p in preds if p.get("id") == parent), None) or max(preds, key=lambda p: p.get("id") or 0)


def _filled(results: list[dict], data: dict) -> set[tuple[int, str]]:
    """``(row_index, field)`` of every field with at least one non-empty control."""
    units = data.get("units") or []
    out = set()
    for r in results or []:
        parsed = _control(r.get("from_name", ""))
        value = ls_config.result_value(r)
        if parsed is None or parsed[3] >= len(units) or value in (None, [], "") \
                or (isinstance(value, str) and not value.strip()):
            continue
        out.add((units[parsed[3]]["row_index"], parsed[0]))
    return out


def _voice_names(results: list[dict], data: dict) -> dict[str, object]:
    """``voice label -> name`` chosen (or pre-filled) in the voice block."""
    voices = data.get(voice_naming.VOICES_KEY) or []
    out: dict[str, object] = {}
    for r in results or []:
        m = _VOICE_CHOICE.fullmatch(r.get("from_name", ""))
        value = ls_config.result_value(r)
        if m and int(m[1]) < len(voices) and value not in (None, [], ""):
            out[voices[int(m[1])]["voice"]] = value[0] if isinstance(value, list) and len(value) == 1 else value
    return out


def _slot_values(results: list[dict], data: dict) -> dict[tuple[int, str, int], str]:
    """``(row_index, "<field>.<subfield>", slot) -> canonical value`` of every filled record control,
    as Label Studio holds it (a pre-filled part of a record, e.g. only its person, is no record
    the parser accepts, yet the annotator kept or changed it)."""
    units = data.get("units") or []
    out = {}
    for r in results or []:
        parsed = _control(r.get("from_name", ""))
        if parsed is None or parsed[1] is None or parsed[3] >= len(units):
            continue
        value = ls_config.result_value(r)
        value = value.strip() if isinstance(value, str) else value
        if value not in (None, [], ""):
            out[(units[parsed[3]]["row_index"], f"{parsed[0]}.{parsed[2]}", parsed[1])] = _canonical(value)
    return out


def _outcome(predicted: bool, filled: bool, same: bool) -> str:
    if predicted and filled:
        return "kept" if same else "changed"
    return "cleared" if predicted else "added"


def _canonical(value) -> str:
    """JSON with choice lists and records as sets (the form's order is no decision)."""
    def norm(v):
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        if isinstance(v, list):
            items = [norm(x) for x in v]
            if all(isinstance(x, (str, int, float)) and not isinstance(x, bool) for x in items) \
                    and len({type(x) for x in items}) <= 1:
                return sorted(items)
            return sorted(items, key=lambda x: json.dumps(x, sort_keys=True, ensure_ascii=False))
        return v
    return json.dumps(norm(value), sort_keys=True, ensure_ascii=False)


@lru_cache(maxsize=1 << 16)  # a round's values repeat (the same speaker, the same choices) row after row
def _canonical_json(text: str) -> str:
    """:func:`_canonical` of a label-table value (JSON). A JSON string is its own canonical form:
    the parser wrote it with the same escaping (``ensure_ascii=False``), and a string has no
    order to sort; only lists and records are read back and sorted."""
    return text if text.startswith('"') else _canonical(json.loads(text))


def _values(parse: Parser, rnd: Round, data: dict, results: list[dict],
            keys: set[tuple[int, str]]) -> tuple[dict, dict]:
    """``(parsed, raw)`` for ``keys`` (``(row_index, field)``): the canonical value by the pull's
    parser (fields it accepts), and each field's raw ``[control, value]`` items (every field)."""
    lines, _ = parse(rnd, data, {"result": results}, "")
    parsed = {(ln["row_index"], ln["field"]): ln["value"] for ln in lines}
    parsed = {k: _canonical_json(parsed[k]) for k in keys if k in parsed}
    units = data.get("units") or []
    raw: dict[tuple[int, str], list] = {}
    for r in results or []:
        name = _control(r.get("from_name", ""))
        if name is not None and name[3] < len(units) and (units[name[3]]["row_index"], name[0]) in keys:
            control = naming.control_name(name[0], 0, name[1], name[2])  # the unit does not matter here
            raw.setdefault((units[name[3]]["row_index"], name[0]), []).append([control, ls_config.result_value(r)])
    return parsed, raw


def _same(key, pvals: tuple[dict, dict], avals: tuple[dict, dict]) -> bool:
    """Equal as the label table stores them; as given when the parser refuses either side."""
    if key in pvals[0] and key in avals[0]:
        return pvals[0][key] == avals[0][key]
    return _canonical(pvals[1].get(key)) == _canonical(avals[1].get(key))


def _shown(key, vals: tuple[dict, dict]) -> str:
    return vals[0][key] if key in vals[0] else _canonical({"raw": vals[1].get(key)})


def measure_tasks(rnd: Round, scenario: str, annotator: str, tasks: list[dict],
                  predictions: dict[int, list[dict]], users: dict[int, str] | None = None, *,
                  parse: Parser) -> list[dict]:
    """Acceptance lines (``SCHEMA``) of one annotator project's raw export (windows not yet stitched).

    ``predictions``: :func:`project_predictions` of the project; ``users``: Label Studio user id
    -> e-mail (the synchronous export names annotators by id); ``parse``: the pull's parser.
    """
    return _measure(rnd, scenario, annotator, tasks, predictions, users or {}, parse)[0]


def _measure(rnd: Round, scenario: str, annotator: str, tasks: list[dict], predictions: dict[int, list[dict]],
             users: dict[int, str], parse: Parser,
             checked: bool = False) -> tuple[list[dict], list[dict], list[tuple[str, str]]]:
    """(lines, the tasks stitched without the stand-ins, the stitching's notes)."""
    tasks, shape_notes = (([t for t in tasks if isinstance(t, dict)], []) if checked
                          else screen.well_formed(tasks))
    versions: dict[str, set[str]] = {}  # sample -> model versions of the predictions shown
    with_pred = []
    for t in tasks:
        p = _shown_prediction(t, predictions, annotator, users)
        if p is not None:
            versions.setdefault((t.get("data") or {}).get("sample_id"), set()).add(str(p.get("model_version") or ""))
        # The prediction rides along as one more annotation, so windows stitch it like the labels.
        result = (p or {}).get("result") or []
        if screen.annotation_shape({"result": result}) is not None:
            result = []  # a prediction no control could show: none
        stand_in = {"id": t.get("id"), "completed_by": _PREDICTOR, "result": result,
                    "updated_at": ""}
        with_pred.append({**t, "annotations": [*(t.get("annotations") or []), stand_in]})
    whole, notes = stitch_tasks(with_pred, checked=True)  # every window has its stand-in: the stand-ins add no note
    notes = shape_notes + notes
    lines: list[dict] = []
    seen: set[str] = set()
    for task in whole:
        data = task.get("data") or {}
        sid = data.get("sample_id")
        if sid in seen or sid not in versions:  # a duplicate (the pull uses the first), or no prediction
            continue
        seen.add(sid)
        mine = _own_latest(task.get("annotations"), annotator, users)
        stand_in = next((a for a in task.get("annotations") or [] if a.get("completed_by") == _PREDICTOR), None)
        if mine is None or stand_in is None:
            continue  # not submitted yet (every window), or skipped
        presults, aresults = stand_in.get("result") or [], mine.get("result") or []
        predicted, filled = _filled(presults, data), _filled(aresults, data)
        keys = predicted | filled
        pvals, avals = _values(parse, rnd, data, presults, keys), _values(parse, rnd, data, aresults, keys)
        version = ",".join(sorted(versions[sid]))
        for key in sorted(keys):
            p = _shown(key, pvals) if key in predicted else None
            a = _shown(key, avals) if key in filled else None
            outcome = _outcome(key in predicted, key in filled, key in predicted and key in filled
                               and _same(key, pvals, avals))
            lines.append({"round": rnd.name, "scenario": data.get("scenario") or scenario, "sample_id": sid,
                          "row_index": key[0], "annotator": annotator, "field": key[1], "slot": None,
                          "model_version": version, "outcome": outcome, "predicted": p, "value": a})
        # Records also part by part, slot by slot as the form shows them.
        pslots, aslots = _slot_values(presults, data), _slot_values(aresults, data)
        for key in sorted(set(pslots) | set(aslots)):
            lines.append({"round": rnd.name, "scenario": data.get("scenario") or scenario, "sample_id": sid,
                          "row_index": key[0], "annotator": annotator, "field": key[1], "slot": key[2],
                          "model_version": version,
                          "outcome": _outcome(key in pslots, key in aslots, pslots.get(key) == aslots.get(key)),
                          "predicted": pslots.get(key), "value": aslots.get(key)})
        pnames, anames = _voice_names(presults, data), _voice_names(aresults, data)
        for voice in sorted(set(pnames) | set(anames), key=str):
            named = lambda names: _canonical({"voice": voice, "name": names[voice]}) if voice in names else None  # noqa: E731
            lines.append({"round": rnd.name, "scenario": data.get("scenario") or scenario, "sample_id": sid,
                          "row_index": None, "annotator": annotator, "field": VOICE_FIELD, "slot": None,
                          "model_version": version,
                          "outcome": _outcome(voice in pnames, voice in anames, pnames.get(voice) == anames.get(voice)),
                          "predicted": named(pnames), "value": named(anames)})
    return lines, [{**t, "annotations": [a for a in t["annotations"] if a.get("completed_by") != _PREDICTOR]}
                   for t in whole], notes


def write(root: DataRoot, round_name: str, lines: list[dict], pulled: set[str],
          gone: set[tuple[str, str]] = frozenset(), replace: bool = False) -> Path:
    """Store a pull's lines at ``DataRoot.acceptance``, keeping earlier lines of annotators not
    pulled now and of (sample, annotator) whose task is gone, as the label table does
    (``replace``: the lines are the whole table, as a rebuild from the archive gives it)."""
    path = root.acceptance(round_name)
    old = pq.ParquetFile(path).read().to_pylist() if path.is_file() and not replace else []
    keep = [r for r in old if r["annotator"] not in pulled or (r["sample_id"], r["annotator"]) in gone]
    rows = sorted(lines + keep, key=lambda r: (r["sample_id"], -1 if r["row_index"] is None else r["row_index"],
                                               r["annotator"], r["field"], r["slot"] or 0, r["predicted"] or "",
                                               r["value"] or ""))
    store.write_parquet(pa.Table.from_pylist(rows, schema=SCHEMA), path)
    return path


def read(root: DataRoot, round_name: str) -> list[dict] | None:
    """The round's acceptance lines; None when the round was never pulled with this measure."""
    path = root.acceptance(round_name)
    return pq.ParquetFile(path).read().to_pylist() if path.is_file() else None


def summarize(lines: Iterable[dict], by_annotator: bool = False) -> list[dict]:
    """Counts per prediction source and field (and annotator): ``predicted`` (kept + changed +
    cleared), each outcome, and ``kept_share`` = kept / predicted (None when nothing was predicted)."""
    counts: dict[tuple, Counter] = {}
    for r in lines:
        key = (r["model_version"], r["annotator"] if by_annotator else None, r["field"])
        counts.setdefault(key, Counter())[r["outcome"]] += 1
    out = []
    for (source, who, fname), c in sorted(counts.items(), key=lambda kv: tuple(x or "" for x in kv[0])):
        predicted = c["kept"] + c["changed"] + c["cleared"]
        row = {"source": source, **({"annotator": who} if by_annotator else {}), "field": fname,
               "predicted": predicted, **{o: c[o] for o in OUTCOMES},
               "kept_share": round(c["kept"] / predicted, 3) if predicted else None}
        out.append(row)
    return out
