"""Speakers named once per voice, in the transcript round.

Without the manifest's speaking-order hint the segmenter labels each diarized voice neutrally
(``Speaker 1``, ``Speaker 2``, the therapist by role when clear: :mod:`pipeline.media.voice_labels`)
and writes the interview's voice table (``draft-voices/<sample_id>.parquet``,
``schemas.DRAFT_VOICES``). This module turns that table into one block at the top of the
transcript round's task, and the annotator's choices back into row speakers on pull:

* **the block** (:func:`config_block`, :func:`voice_entries`): every voice once, with a player
  that plays exactly a stretch where that voice speaks alone (``ls_config.turn_player``, the
  per-row players' mechanism), its first lines, and buttons for the sample's participants and
  the therapist ("who is this voice?"). A voice already named (speaking-order hint, enrolled
  voice print, therapist by role, subtitles) is pre-filled with that name as a proposal: it has
  an "accept" box the annotator must tick (through the desk's front: the key ``a``, or picking a
  person for that voice) before Label Studio takes the window.
* **the rows**: a row's speaker and spoken-to lists also offer its draft voice as a choice
  stored as ``voice:<label>`` (shown ``<label> (voice)``, or the name alone where the label is
  already a name of the list, e.g. the therapist named by role), pre-filled (:func:`prefill`). Such a
  row means "whoever that voice is"; picking a person on a row overrides it for that row only.
* **on pull** (:func:`resolve`): the voice names replace every ``voice:`` choice of the
  annotation before it is validated; a row left on a voice nobody named is a problem naming the
  row. On a row left on its voice, an addressee that turns out to be the speaker (the draft
  guessed it before anyone was named, or two voices were named as one person) is dropped, and
  an emptied one becomes the therapist, or the group for the therapist's row
  (``taxonomy.fallback_addressee``, as in the segmenter); on a row whose speaker the annotator
  picked, it stays a problem.
  The block's own results (names, proposal marks, "accept" boxes) are removed: the label table
  holds rows only.

Long samples are pushed in parts (:mod:`.windows`): the block is shown in the first part only
(:func:`first_part_only`: one place to name each voice, no two answers to reconcile), and since
pull stitches the parts into one annotation first, its names apply to every part's rows.

A task without a voice table (later rounds, adjudication, samples from a release) gets an empty
block and the plain lists, so nothing changes for it.

Background dialogue (backchannels) is never annotated: gold names its voices from the rows
(:func:`name_background`: a voice's name is the speaker most of its rows got in gold).
"""
from __future__ import annotations

from html import escape
from xml.sax.saxutils import quoteattr

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import schemas, taxonomy
from pipeline.annotation.rounds import Round
from pipeline.paths import DataRoot

SPEAKER_FIELD = "primary_speaker"
TARGET_FIELD = "target"
VOICES_KEY = "voices"              # task data: the block's voices (first part of a sample only)
PEOPLE_KEY = "voice_people"        # task data: whom a voice can be (participants + therapist)
NOTE_KEY = "voices_note"           # task data: in a later part of a sample, where its voices are named
UNIT_SPEAKERS = "speaker_options"  # per unit: the row's voice + every entity
UNIT_TARGETS = "target_options"    # per unit: the draft's voice targets + every entity
TOKEN = "voice:"                   # stored value of "this voice, as named in the block"
SAMPLE_S = 5.0                     # longest stretch a voice's player plays
FIRST_LINES = 3
FIRST_WORDS = 16
# The block's controls are named so that naming.parse_control_name never takes them for a
# row's control (no trailing _<unit>): windows never renumber them and pull never reports them.
LABEL_NAME, INFO_NAME, CHOICE_NAME = "voice_{v}_label", "voice_{v}_info", "voice_{v}_is"
# A name the push pre-filled is a proposal, as a row's pre-filled value is (``ls_config.proposal_box``):
# per voice a hidden mark (MARK_NAME, set by the prediction) and an "accept" box (ACCEPT_NAME, shown and
# required only where the mark is set; its view's id is "proposal-" + the choice's name, as a row's is,
# so the desk's front treats both alike). The hyphens keep both out of naming.parse_control_name, and
# ``ls_config.is_prefill_control`` drops them on pull.
MARK_NAME, ACCEPT_NAME, MARK_VALUE = "proposed-voice_{v}", "accept-voice_{v}_is", "name"


def applies(rnd: Round) -> bool:
    """Whether the round names speakers (the transcript round: a ``primary_speaker`` choice)."""
    return any(f.name == SPEAKER_FIELD and f.type == "choice" for f in rnd.fields)


def token(voice: str) -> str:
    return f"{TOKEN}{voice}"


# --- the labeling config -------------------------------------------------------------------

def config_block(rnd: Round) -> list[str]:
    """The voice block's XML lines (empty for a round that names no speaker)."""
    if not applies(rnd):
        return []
    v = "{{v}}"
    label, info, choice = (n.format(v=v) for n in (LABEL_NAME, INFO_NAME, CHOICE_NAME))
    msg = quoteattr("A voice under 'Who is each voice?' (at the top) has no name yet; pick who it is.")
    mark, accept = MARK_NAME.format(v=v), ACCEPT_NAME.format(v=v)
    # one sentence; Label Studio names no data in it, so the desk's front adds the voice's name beside it
    proposed = quoteattr("The proposed name of a voice under 'Who is each voice?' is not accepted yet (the first "
                         "such voice from the top): listen, then accept it (key a) or pick who it is.")
    return [
        '  <View idAttr="voices">',
        f'    <HyperText name="voices_note" value="${NOTE_KEY}" inline="true"/>',
        f'    <Repeater on="${VOICES_KEY}" indexFlag="{v}">',
        f'      <View idAttr="voice_{v}" style="background: #f4f7fb; padding: 4px 8px; margin-bottom: 4px">',
        f'        <HyperText name="{info}" value="${VOICES_KEY}[{v}].html" inline="true"/>',
        f'        <Text name="{label}" value="${VOICES_KEY}[{v}].label"/>',
        f'        <Choices name="{choice}" toName="{label}" choice="single" showInline="true" required="true"'
        f' requiredMessage={msg} value="${PEOPLE_KEY}"/>',
        f'        <View idAttr="proposal-{choice}" visibleWhen="choice-selected" whenTagName="{mark}"'
        f' whenChoiceValue="{MARK_VALUE}">',
        f'          <Choices name="{accept}" toName="{label}" choice="multiple" showInline="true" required="true"'
        f' requiredMessage={proposed}>',
        f'            <Choice value="proposed: accept it"/>',
        "          </Choices>",
        "        </View>",
        "      </View>",
        # the mark beside the voice's form, not in it: no list of the form, for the keys or anyone
        f'      <View idAttr="{mark}" style="display: none">',
        f'        <Choices name="{mark}" toName="{label}" choice="multiple">',
        f'          <Choice value="{MARK_VALUE}"/>',
        "        </Choices>",
        "      </View>",
        "    </Repeater>",
        "  </View>",
    ]


def add_to_config(rnd: Round, xml: str) -> str:
    """``ls_config.render_config``'s text with the voice block above the rows' forms and the rows'
    speaker and spoken-to lists taken from each unit (its voice as a choice)."""
    if not applies(rnd):
        return xml
    anchor = '  <Repeater on="$units"'
    if xml.count(anchor) != 1:
        raise ValueError("voice naming: the config has no single unit Repeater to put the voice block above")
    xml = xml.replace(anchor, "\n".join(config_block(rnd)) + "\n" + anchor)
    for field, key in ((SPEAKER_FIELD, UNIT_SPEAKERS), (TARGET_FIELD, UNIT_TARGETS)):
        start = xml.find(f'<Choices name="{field}_{{{{idx}}}}"')
        end = xml.find("/>", start)
        if start < 0 or 'value="$entities"' not in xml[start:end]:
            raise ValueError(f"voice naming: no {field} choice over $entities in the config")
        xml = xml[:start] + xml[start:end].replace('value="$entities"', f'value="$units[{{{{idx}}}}].{key}"') + xml[end:]
    return xml


# --- task data -----------------------------------------------------------------------------

def attach_voice_tables(rnd: Round, samples, root: DataRoot | None) -> list[dict]:
    """Samples with their voice table (``sample["voices"]``: DRAFT_VOICES records) where the
    segmenter wrote one; the push hook of the transcript round."""
    samples = list(samples)
    if root is None or not applies(rnd):
        return samples
    out = []
    for s in samples:
        path = root.draft_voices(s["sample_id"])
        if not path.is_file():
            out.append(s)
            continue
        try:
            voices = pq.read_table(path, schema=schemas.DRAFT_VOICES).to_pylist()
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise ValueError(f"{path}: not a readable voice table of {s['sample_id']} ({exc}); "
                             f"`rescue segment {s['sample_id']}` writes it again") from None
        out.append({**s, "voices": voices})
    return out


def _first_words(text: str, n: int = FIRST_WORDS) -> str:
    words = (text or "").split()
    return " ".join(words[:n]) + (" ..." if len(words) > n else "")


def voice_entries(sample: dict, media_url: str, player) -> list[dict]:
    """The block's voices: those of the sample's voice table that its rows carry, in table order.

    Each: ``voice`` (the rows' label), ``label`` (the question above its choices), ``start``/``end`` (the stretch its
    player plays: the table's stretch where it speaks alone, else its first row, at most
    :data:`SAMPLE_S`), ``rows`` (its first rows) and ``html`` (player and first lines; the
    first voice's also says what to do). ``player(media_url, start, end)``: the per-row player."""
    rows = sorted(sample.get("rows") or [], key=lambda r: r["row_index"])
    carried = {r.get(SPEAKER_FIELD) for r in rows} | {t for r in rows for t in r.get(TARGET_FIELD) or []}
    by_index = {r["row_index"]: r for r in rows}
    out = []
    for v in sample.get("voices") or []:
        voice = v["voice"]
        if voice not in carried:
            continue
        own = [r for r in rows if r.get(SPEAKER_FIELD) == voice]
        first = [by_index[i] for i in v.get("first_rows") or [] if i in by_index] or own[:FIRST_LINES]
        start, end = v.get("sample_start"), v.get("sample_end")
        if start is None or end is None:
            if not own:
                start = end = None
            else:
                start, end = float(own[0]["start_time"]), float(own[0]["end_time"])
        if start is not None:
            end = min(float(end), float(start) + SAMPLE_S)
        out.append({"voice": voice, "label": f"Who is {voice}?", "start": start, "end": end,
                    "rows": [r["row_index"] for r in first[:FIRST_LINES]], "named_by": v.get("named_by"),
                    "n_rows": len(own)})
    for i, e in enumerate(out):
        clip = player(media_url, e["start"], e["end"]) if e["start"] is not None else ""
        lines = "".join(f"<li>row {r['row_index']}: {escape(_first_words(r.get('dialogue_cleaned') or ''))}</li>"
                        for r in (by_index[ri] for ri in e["rows"]))
        intro = ("<p><b>Who is each voice?</b> Listen to each voice once and pick who it is. Every row "
                 "marked '&lt;voice&gt; (voice)' below takes that name; pick a person on a row only where "
                 "that row is someone else.</p>") if i == 0 else ""
        heard = (f" - plays {e['start']:.1f}-{e['end']:.1f} s" if e["start"] is not None else " - no audio")
        e["html"] = (f"{intro}<div><b>{escape(e['voice'])}</b> ({e['n_rows']} rows{heard}) {clip}"
                     f"<ul style=\"margin: 2px 0\">{lines}</ul></div>")
    return out


def add_task_data(rnd: Round, sample: dict, data: dict, media_url: str, player) -> dict:
    """Add the voice block and the rows' voice choices to ``ls_config.build_task_data``'s data
    (in place; returned). Every task of a speaker-naming round gets the keys its config reads."""
    if not applies(rnd):
        return data
    voices = voice_entries(sample, media_url, player)
    labels = {e["voice"] for e in voices}
    entities = [e["value"] for e in data["entities"]]
    people = [*data["participants"], taxonomy.THERAPIST]
    data[VOICES_KEY] = voices
    data[NOTE_KEY] = ""
    data[PEOPLE_KEY] = [{"value": p} for p in people]
    draft = {r["row_index"]: r for r in sample.get("rows") or []}
    for u in data["units"]:
        row = draft.get(u["row_index"]) or {}
        speaker = row.get(SPEAKER_FIELD)
        targets = [t for t in row.get(TARGET_FIELD) or [] if t in labels]
        u[UNIT_SPEAKERS] = _row_options([speaker] if speaker in labels else [], entities)
        u[UNIT_TARGETS] = _row_options(targets, entities)
    return data


def _row_options(voices: list[str], entities: list[str]) -> list[dict]:
    """A row's list: its draft voices (stored ``voice:<label>``), then every entity. A voice whose
    label is already one of the entities (the therapist named by role, a name from the speaking
    order) shows that name alone and stands for it on this row: one "Therapist", not "Therapist
    (voice)" beside "Therapist"."""
    named = {v for v in voices if v in entities}
    return [{"value": v if v in named else f"{v} (voice)", "alias": token(v)} for v in voices] \
        + [{"value": e} for e in entities if e not in named]


def first_part_only(parts: list[dict]) -> list[dict]:
    """Windows of one sample: the voice block stays in the first part only; the later parts say
    where it is (an annotator may open part 2 first)."""
    for part in parts[1:]:
        if part.get(VOICES_KEY):
            part[VOICES_KEY] = []
            part[NOTE_KEY] = ("<p><b>Voices are named once, in part 1 of this sample</b> ('Who is each voice?'): "
                              "every row marked '&lt;voice&gt; (voice)' takes the name given there; pick a person "
                              "on a row only where that row is someone else.</p>")
    return parts


def prefill(rnd: Round, data: dict, values: dict[int, dict], prediction: list[dict]) -> list[dict]:
    """The pre-annotation (``prediction``, from ``values`` = ``{row_index: {field: value}}``) with
    the voice block (a voice already named keeps its name, as a proposal: its hidden mark set) and, where a row's value is a voice
    of the block, that voice's choice (``voice:<label>``) instead of the label; other values stay."""
    if not applies(rnd) or not values:  # no pre-annotation asked for: none here either
        return prediction
    people = {p["value"] for p in data.get(PEOPLE_KEY) or []}
    named = [i for i, v in enumerate(data.get(VOICES_KEY) or []) if v["voice"] in people]
    voices = data.get(VOICES_KEY) or []
    out = [{"from_name": name.format(v=i), "to_name": LABEL_NAME.format(v=i), "type": "choices",
            "value": {"choices": [value]}}
           for i in named for name, value in ((CHOICE_NAME, voices[i]["voice"]), (MARK_NAME, MARK_VALUE))]
    replaced = set()
    for i, u in enumerate(data.get("units") or []):
        row = values.get(u["row_index"]) or {}
        for field, key in ((SPEAKER_FIELD, UNIT_SPEAKERS), (TARGET_FIELD, UNIT_TARGETS)):
            options = u.get(key) or []
            tokens = {o["alias"] for o in options if o.get("alias", "").startswith(TOKEN)}
            plain = {o["value"] for o in options if "alias" not in o}
            value = row.get(field)
            items = value if isinstance(value, list) else [value]
            if not tokens or not any(token(v) in tokens for v in items if isinstance(v, str)):
                continue
            chosen = [token(v) if token(v) in tokens else v for v in items if token(v) in tokens or v in plain]
            out.append({"from_name": f"{field}_{i}", "to_name": f"turn_{i}", "type": "choices",
                        "value": {"choices": chosen}})
            replaced.add(f"{field}_{i}")
    return out + [r for r in prediction if r.get("from_name") not in replaced]


# --- pull ----------------------------------------------------------------------------------

def resolve(rnd: Round, data: dict, annotation: dict, report) -> dict:
    """The annotation with the voice names applied to its rows and the block's results removed.

    ``report(row_index, field, problem, value)`` receives a problem: a voice named as someone
    who is not a participant or the therapist, a row left on a voice nobody named (that row's
    choice is left out, so the row also lacks its speaker or target)."""
    results = annotation.get("result") or []
    if not applies(rnd) or not any(_is_block(r) or _has_token(r) or is_proposal_control(_name(r)) for r in results):
        return annotation
    results = [r for r in results if not is_proposal_control(_name(r))]  # a name's mark and "accept" box
    voices = data.get(VOICES_KEY) or []
    people = {p["value"] for p in data.get(PEOPLE_KEY) or []} or {*(data.get("participants") or []),
                                                                     taxonomy.THERAPIST}
    names: dict[str, str] = {}
    for r in results:
        if not _is_block(r):
            continue
        index = _block_index(r)
        chosen = _choices(r)
        if index is None or index >= len(voices):
            report(None, r.get("from_name"), f"voice {index} does not exist ({len(voices)} voices shown)", chosen)
        elif len(chosen) != 1 or chosen[0] not in people:
            report(None, f"voice {voices[index]['voice']}",
                   f"voice {voices[index]['voice']!r} named as {', '.join(map(str, chosen)) or 'nobody'}: pick one of "
                   f"{', '.join(sorted(people))}", chosen)
        else:
            names[voices[index]["voice"]] = chosen[0]
    units = data.get("units") or []
    speakers: dict[int, str] = {}
    by_voice: set[int] = set()  # units whose row was left on its voice
    out = []
    for r in results:
        if _is_block(r):
            continue
        unit = _unit_of(_name(r), SPEAKER_FIELD)
        if unit is not None and _has_token(r):
            r = _renamed(r, names, units, unit, SPEAKER_FIELD, report)
            if r is None:
                continue
            by_voice.add(unit)
        if unit is not None:
            chosen = _choices(r)
            if len(chosen) == 1:
                speakers[unit] = chosen[0]
        out.append(r)
    final = []
    for r in out:  # targets once every row's speaker is known
        unit = _unit_of(_name(r), TARGET_FIELD)
        if unit is not None and (_has_token(r) or unit in by_voice):
            r = _renamed(r, names, units, unit, TARGET_FIELD, report, speaker=speakers.get(unit),
                         fallback=(taxonomy.fallback_addressee(speakers.get(unit), data.get("scenario"))
                                   if unit in by_voice else None))
            if r is None:
                continue
        final.append(r)
    return {**annotation, "result": final}


def is_proposal_control(name: str) -> bool:
    """Whether ``name`` is a voice's proposal mark or "accept" box (no answer: see :data:`MARK_NAME`)."""
    for pattern in (MARK_NAME, ACCEPT_NAME):
        head, _, tail = pattern.partition("{v}")
        if name.startswith(head) and name.endswith(tail) and name[len(head):len(name) - len(tail)].isdigit():
            return True
    return False


def _is_block(result: dict) -> bool:
    return _block_index(result) is not None


def _name(result: dict) -> str:
    """The result's control name; "" for anything but a string (typed into a desk's API: hostile)."""
    name = result.get("from_name")
    return name if isinstance(name, str) else ""


def _choices(result: dict) -> list:
    """The result's choices; [] where its value or choices are not what a choices control sends."""
    value = result.get("value")
    choices = value.get("choices") if isinstance(value, dict) else None
    return choices if isinstance(choices, list) else []


def _block_index(result: dict) -> int | None:
    head, _, tail = _name(result).partition("_")
    index, _, rest = tail.partition("_")
    return int(index) if head == "voice" and rest == "is" and index.isdigit() else None


def _has_token(result: dict) -> bool:
    return any(isinstance(c, str) and c.startswith(TOKEN) for c in _choices(result))


def _unit_of(name: str, field: str) -> int | None:
    prefix = f"{field}_"
    tail = name[len(prefix):] if name.startswith(prefix) else ""
    return int(tail) if tail.isdigit() else None


def _renamed(result: dict, names: dict[str, str], units: list[dict], unit: int, field: str, report,
             speaker: str | None = None, fallback: list[str] | None = None) -> dict | None:
    """``result`` with its ``voice:`` choices replaced by the voices' names (None, after a report,
    when one was not named). A target equal to the row's speaker is dropped when it came from a
    voice, or - ``fallback`` given: the row was left on its voice - whatever it was; an emptied
    target becomes ``fallback``, else it is a problem."""
    row = units[unit]["row_index"] if unit < len(units) else None
    chosen = []
    for c in _choices(result):
        if not (isinstance(c, str) and c.startswith(TOKEN)):
            chosen.append(c)
            continue
        voice = c[len(TOKEN):]
        if voice not in names:
            report(row, field, f"left on voice {voice!r}, which was not named (name it under 'Who is each voice?' "
                               f"in the sample's first part, or pick a person on this row)", c)
            return None
        if field == TARGET_FIELD and names[voice] == speaker:
            continue  # two voices named as one person: the draft's guess of a self-target goes
        chosen.append(names[voice])
    chosen = [c for i, c in enumerate(chosen) if c not in chosen[:i]]  # once each (a typed value may be a list)
    if fallback is not None:
        chosen = [c for c in chosen if c != speaker] or fallback
    if not chosen:
        report(row, field, f"its only addressee was a voice named as the row's own speaker {speaker} (two voices "
                           f"named as one person?); pick whom this row addresses", result.get("value"))
        return None
    value = result.get("value")
    return {**result, "value": {**(value if isinstance(value, dict) else {}), "choices": chosen}}


# --- gold ----------------------------------------------------------------------------------

def name_background(base_rows: list[dict], gold_rows: list[dict]) -> list[dict]:
    """Gold rows whose ``background_dialogue`` (never annotated: it comes from the draft) speaks
    of people the way the transcript round named them. A draft voice's name is the speaker most
    of its rows got in gold (so the voice block's name, with row overrides and adjudication
    outvoted by the rest); an entry's target that was its row's draft speaker becomes that row's
    gold speaker. Only background entries change: rows' own speakers and targets are gold."""
    base = {r["row_index"]: r for r in base_rows}
    votes: dict[str, dict[str, int]] = {}
    for g in gold_rows:
        voice, name = (base.get(g["row_index"]) or {}).get(SPEAKER_FIELD), g.get(SPEAKER_FIELD)
        if voice and name:
            votes.setdefault(voice, {})
            votes[voice][name] = votes[voice].get(name, 0) + 1
    names = {v: max(c, key=lambda n: c[n]) for v, c in votes.items()}  # ties: the first row's name
    out = []
    for g in gold_rows:
        draft_speaker = (base.get(g["row_index"]) or {}).get(SPEAKER_FIELD)
        entries = []
        for b in g.get("background_dialogue") or []:
            speaker = names.get(b.get("speaker"), b.get("speaker"))
            targets = [g[SPEAKER_FIELD] if t == draft_speaker else names.get(t, t) for t in b.get("target") or []]
            kept = [t for t in dict.fromkeys(targets) if t != speaker]
            if not kept and targets and g[SPEAKER_FIELD] != speaker:
                kept = [g[SPEAKER_FIELD]]
            entries.append({**b, "speaker": speaker, "target": kept})
        out.append({**g, "background_dialogue": entries} if g.get("background_dialogue") else g)
    return out
