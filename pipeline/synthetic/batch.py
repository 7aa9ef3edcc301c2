"""A RESCUE-shaped interview batch: what a maintainer ingests to rebuild RESCUE.

At ``scale=1`` it is 191 interviews (174 couple, 17 family), 7,079 rows and 1,064.8 minutes,
the paper's Table 3 (the numbers live once, in :data:`pipeline.synthetic.corpus.SHAPES`); any
``scale`` keeps the proportions. Each interview is one :mod:`~pipeline.synthetic.corpus` sample
(speakers, targets, labels, row count) spoken by :mod:`~pipeline.synthetic.interviews` (espeak-ng,
one therapist voice everywhere, an MP4 and an SRT), its pauses stretched so the recording lasts
the scenario's seconds per row times its rows. The hard parts of real interviews are in it:
therapist and partner backchannels in pauses and spoken *over* a client's sentence, clients
interrupting each other, and a few bad files (a cut-short MP4 that ffprobe cannot open, an SRT
with an unreadable timing line).

What :func:`generate_batch` writes into ``<data root>/batches/<name>/``::

    manifest.csv        the ingest manifest (``pipeline.media.manifest.read_manifest``)
    <stem>.mp4 / .srt   one video and its subtitles per interview
    <stem>.rttm         who spoke when, backchannels included (the diarization truth)
    truth.json          per interview: rows (speakers, times, text, labels), its fault and what
                        the pipeline must do with it; the simulated annotators and their per-field
                        error rates; the agreement those rates imply per round and field

Deterministic: the same (scale, seed, max_rows) gives byte-identical files, however many
interviews are rendered at once.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pipeline import taxonomy
from pipeline.annotation.rounds import load_round, round_names
from pipeline.paths import DataRoot, check_name, check_sample_id, slug
from pipeline.store import atomic_write_text
from pipeline.synthetic import corpus, interviews
from pipeline.synthetic.annotators import SimulatedAnnotator, expected_alpha_units

FAULT_SHARE = 0.02  # of the interviews, per kind of bad file (at least one each from 2 interviews up)
FAULTS = {
    # kind: what the pipeline must do with it (part 2 checks the outcome against this)
    "corrupt_video": {"stage": "ingest", "outcome": "quarantined", "reason_contains": "unreadable or corrupt media"},
    "malformed_subtitles": {"stage": "transcribe", "outcome": "error", "reason_contains": "cannot read the timing line"},
}
SPEECH_FILL = 0.8         # share of a row's time filled with speech; pauses take the rest
MAX_SENTENCES = 4         # per row; a longer row gets longer pauses instead
INTERRUPT_SHARE = 0.2     # of client rows that follow another client: they cut in 0.3-0.6 s early
THERAPIST_OVER_EVERY = 12  # one therapist "Mm-hmm." over a client sentence per this many client rows
PARTNER_OVER_EVERY = 30   # one partner backchannel over a client sentence per this many client rows

# Simulated annotators: a base error rate each, times a per-field difficulty (relation and
# strategy types are the hard calls, who spoke the easy one). Text fields take the base rate.
ANNOTATORS = {"sim-careful": 0.05, "sim-steady": 0.10, "sim-hasty": 0.20}
DIFFICULTY = {"primary_speaker": 0.5, "target": 1.0, "utterance_type": 1.5, "internal_emotion": 0.5,
              "internal_emotion.person": 0.5, "internal_emotion.intensity": 1.5, "viewpoints_attitudes": 0.75,
              "viewpoints_attitudes.source": 0.5, "viewpoints_attitudes.target": 0.5, "relation_cycle_state": 2.0,
              "relation_cycle_evidence_rows": 1.0, "support_strategy": 0.75, "support_strategy.strategy_type": 1.5,
              "support_strategy.target": 1.0}


class BatchError(ValueError):
    """The batch cannot be written where asked; the message names the folder and why."""


@dataclass(frozen=True)
class Planned:
    sample: dict            # the corpus sample (labels, speakers), rows cut to max_rows
    stem: str               # file name stem of its video/subtitles
    target_duration_s: float
    fault: str | None


@dataclass(frozen=True)
class BatchResult:
    folder: Path
    manifest: Path
    truth: Path
    totals: dict


def spec_totals(scale: float = 1.0) -> dict:
    """RESCUE's totals at ``scale`` (interviews, couple, family, rows, minutes), from corpus.SHAPES."""
    shapes = corpus.SHAPES
    return {"interviews": sum(max(1, round(s.samples * scale)) for s in shapes.values()),
            **{scn: max(1, round(s.samples * scale)) for scn, s in shapes.items()},
            "rows": round(sum(s.rows for s in shapes.values()) * scale),
            "minutes": round(sum(s.minutes for s in shapes.values()) * scale, 1)}


def seconds_per_row(scenario: str) -> float:
    shape = corpus.SHAPES[scenario]
    return shape.minutes * 60 / shape.rows


def _digest_seed(*key) -> int:
    return int.from_bytes(hashlib.blake2b(json.dumps(key).encode(), digest_size=6).digest(), "big")


def cut_rows(sample: dict, max_rows: int) -> dict:
    """``sample`` cut to ``max_rows`` consecutive rows (smoke runs) in which the therapist and
    every participant speak, opening on a client row as every corpus sample does: the first such
    run of rows, longer than ``max_rows`` only where no shorter one has every voice (a family of
    four clients needs five rows). A plain prefix could leave a listed voice silent (at scale 0.05
    and 6 rows, 4 of 8 good interviews), and the diarizer, told therapist + participants, then
    split a real voice in two: more drafted rows than the truth. Rows are renumbered from 1
    and evidence rows shifted to the cut's positions."""
    rows = sample["rows"]
    if len(rows) <= max_rows:
        return sample
    voices = {taxonomy.THERAPIST, *sample["participants"]}
    for length in range(max_rows, len(rows) + 1):
        for start in range(len(rows) - length + 1):
            run = rows[start:start + length]
            if run[0]["primary_speaker"] != taxonomy.THERAPIST and voices <= {r["primary_speaker"] for r in run}:
                return {**sample, "rows": [_moved(r, start, length, i) for i, r in enumerate(run)]}
    return {**sample, "rows": rows[:max_rows]}  # the whole sample lacks a voice: nothing to keep


def _moved(row: dict, start: int, length: int, i: int) -> dict:
    """Row ``start + i`` of a sample as row ``i`` of its cut (``length`` rows from ``start``); its
    times stay (the rendered audio sets the truth's)."""
    out = dict(row, row_index=i + 1)
    evidence = row.get("relation_cycle_evidence_rows")
    if evidence is not None:
        out["relation_cycle_evidence_rows"] = [e - start for e in evidence if 0 <= e - start < length]
    return out


def plan_batch(scale: float, seed: int = 0, max_rows: int | None = None) -> list[Planned]:
    """Which interviews, how long, and which are bad: cheap (no audio)."""
    if max_rows is not None and max_rows < 4:
        raise ValueError(f"max_rows={max_rows}: an interview needs at least 4 rows")
    samples = corpus.generate(scale=scale, seed=seed)
    if max_rows:
        samples = [cut_rows(s, max_rows) for s in samples]
    faults: dict[int, str] = {}
    if len(samples) >= 2:
        rng = random.Random(f"{seed}:faults")
        n = max(1, round(len(samples) * FAULT_SHARE))
        picked = rng.sample(range(len(samples)), min(len(samples), n * len(FAULTS)))
        for k, i in enumerate(picked):
            faults[i] = list(FAULTS)[k % len(FAULTS)]
    out = []
    for i, s in enumerate(samples):
        check_sample_id(s["sample_id"])
        stem = check_name(slug(s["sample_id"].replace("/", "--")), "interview file name")
        out.append(Planned(s, stem, round(len(s["rows"]) * seconds_per_row(s["scenario"]), 3), faults.get(i)))
    return out


def _first_appearance(sample: dict) -> list[str]:
    """The clients in order of first appearance (spec §1.2: speaker, then targets)."""
    seen: list[str] = []
    for r in sample["rows"]:
        for who in [r["primary_speaker"], *r["target"]]:
            if who in sample["participants"] and who not in seen:
                seen.append(who)
    return seen + [p for p in sample["participants"] if p not in seen]


def script_for(plan: Planned, seed: int) -> tuple[list[str], list[interviews.ScriptRow]]:
    """The interview's script: the corpus rows' speakers and targets, real sentences filling
    ``SPEECH_FILL`` of each row's time, its backchannels, interruptions and overlapped backchannels."""
    sample = plan.sample
    people = _first_appearance(sample)
    voice = {s: interviews.VOICES[i % len(interviews.VOICES)] for i, s in enumerate([taxonomy.THERAPIST, *people])}
    rng = random.Random(_digest_seed(seed, sample["sample_id"], "script"))
    rows: list[interviews.ScriptRow] = []
    for i, r in enumerate(sample["rows"]):
        speaker = r["primary_speaker"]
        pool = interviews.THERAPIST_LINES if speaker == taxonomy.THERAPIST else interviews.CLIENT_LINES
        want = SPEECH_FILL * (r["end_time"] - r["start_time"])
        sentences, spoken = [], 0.0
        for line in rng.sample(pool, MAX_SENTENCES):
            length = len(interviews._speak(line, *voice[speaker])) / interviews.RATE
            if sentences and spoken + length > want:
                break  # stop short rather than overrun the row's time
            sentences.append(line)
            spoken += length
        row = interviews.ScriptRow(speaker, sentences, list(r["target"]))
        bd = r.get("background_dialogue") or []
        if bd and len(sentences) >= 2:
            row.backchannel = (bd[0]["speaker"], bd[0]["content"])
        prev = sample["rows"][i - 1]["primary_speaker"] if i else None
        if (i and speaker != taxonomy.THERAPIST and prev not in (None, taxonomy.THERAPIST, speaker)
                and not rows[-1].overlap_s and rng.random() < INTERRUPT_SHARE):
            row.overlap_s = round(rng.uniform(0.3, 0.6), 2)
        rows.append(row)
    clients = sum(1 for r in rows if r.speaker != taxonomy.THERAPIST)
    interviews._add_overlapped(rows, people, round(clients / THERAPIST_OVER_EVERY),
                               round(clients / PARTNER_OVER_EVERY), random.Random(_digest_seed(seed, sample["sample_id"], "over")))
    return people, rows


def _break(plan: Planned, folder: Path) -> None:
    """Make the planned bad file really bad."""
    if plan.fault == "corrupt_video":
        video = folder / f"{plan.stem}.mp4"
        data = video.read_bytes()
        # an interrupted copy: the index (moov, written last) is gone, so nothing can be read
        video.write_bytes(data[: len(data) // 3])
    elif plan.fault == "malformed_subtitles":
        srt = folder / f"{plan.stem}.srt"
        cues = srt.read_text().split("\n\n")
        k = len(cues) // 2
        head, timing, *text = cues[k].split("\n")
        cues[k] = "\n".join([head, timing.replace(",", ";", 1).replace(":", "h", 1), *text])  # 00h00:07;250 -->
        srt.write_text("\n\n".join(cues))


def render_one(plan: Planned, folder: Path, seed: int) -> dict:
    """Speak one planned interview into ``folder``; its truth entry."""
    people, script = script_for(plan, seed)
    files = interviews.render(folder, plan.stem, people, script, seed=_digest_seed(seed, plan.sample["sample_id"]) % 2**31,
                              target_duration_s=plan.target_duration_s, fast_audio=True)
    spoken = json.loads(files["rows"].read_text())
    files["wav"].unlink()
    files["rows"].unlink()  # the rows live in truth.json, once
    rows = []
    for label_row, timed in zip(plan.sample["rows"], spoken["rows"]):
        row = dict(label_row)
        row.update(start_time=timed["start_time"], end_time=timed["end_time"],
                   dialogue_cleaned=timed["dialogue_cleaned"], background_dialogue=timed["background_dialogue"])
        rows.append(row)
    _break(plan, folder)
    sample = plan.sample
    return {"sample_id": sample["sample_id"], "scenario": sample["scenario"], "participants": people,
            "video": f"{plan.stem}.mp4", "subtitles": f"{plan.stem}.srt", "rttm": f"{plan.stem}.rttm",
            "duration_s": spoken["duration_s"],
            "voices": {who: "%s:%d" % interviews.VOICES[i % len(interviews.VOICES)]
                       for i, who in enumerate([taxonomy.THERAPIST, *people])},
            "fault": {"kind": plan.fault, **FAULTS[plan.fault]} if plan.fault else None,
            "interruptions": sum(1 for r in script if r.overlap_s),
            "overlapped_backchannels": sum(len(r.overlapped) for r in script),
            "rows": rows}


# --- simulated annotators and the agreement they imply -----------------------------------

def simulated_annotators(seed: int = 0) -> list[SimulatedAnnotator]:
    """The batch's three annotators with their per-field error rates (``*``: text fields)."""
    out = []
    for i, (name, base) in enumerate(ANNOTATORS.items()):
        rates = {"*": base, **{path: round(min(0.9, base * k), 4) for path, k in DIFFICULTY.items()}}
        out.append(SimulatedAnnotator(name, rates, seed=_digest_seed(seed, name) % 2**31))
    return out


def expected_agreement(samples: list[dict], annotators: list[SimulatedAnnotator]) -> dict:
    """Per round and field: the large-sample Krippendorff alpha the annotators' error rates imply
    on these samples (``pipeline.synthetic.annotators.expected_alpha_units``). ``exact``: false
    where the theory leaves something out (records an annotator invents or files under another
    key); ``alpha`` is null for set-valued (MASI) fields, which have no closed form here."""
    out: dict[str, dict] = {}
    for name in round_names():
        rnd = load_round(name)
        fields: dict[str, dict] = {}
        for path, metric, _threshold in rnd.agreement_fields():
            parent, _, sub = path.partition(".")
            f = rnd.field(parent)
            units, exact, note = [], True, None
            if metric == "masi":
                fields[path] = {"metric": metric, "alpha": None, "exact": False, "units": 0,
                                "note": "set-valued answers: no closed form"}
                continue
            if f.type == "records" and sub and sub in ("source", "target") and parent == "viewpoints_attitudes":
                fields[path] = {"metric": metric, "alpha": None, "exact": False, "units": 0,
                                "note": "two-part record key: no closed form"}
                continue
            for s in samples:
                n = len(s["rows"])
                for r in s["rows"]:
                    if not rnd.applies(r["primary_speaker"]):
                        continue
                    if f.type != "records":
                        excl = {r.get(f.distinct_from)} if f.distinct_from else set()
                        units.append([a.answer_distribution(f, path, r.get(parent), s["scenario"], s["participants"],
                                                            n, excl) for a in annotators])
                    elif not sub:  # presence
                        units.append([a.presence_distribution(f, bool(r.get(parent)), s["scenario"],
                                                              s["participants"], n) for a in annotators])
                    else:
                        exact, note = False, "over the truth's records; invented or re-keyed records left out"
                        g = f.subfield(sub)
                        for rec in (r.get(parent) or [])[: f.max_items]:
                            laws = [a.answer_distribution(g, path, rec.get(sub), s["scenario"], s["participants"], n)
                                    for a in annotators]
                            if sub in f.key:  # a key answered as the empty choice is no record: not coded
                                laws = [{k: w / (1 - law.get("", 0.0)) for k, w in law.items() if k != ""}
                                        for law in laws]
                            units.append(laws)
            alpha = expected_alpha_units(units, "interval" if metric == "interval" else "nominal")
            fields[path] = {"metric": metric, "alpha": None if alpha is None else round(alpha, 4), "exact": exact,
                            "units": len(units), **({"note": note} if note else {})}
        out[name] = fields
    return out


# --- the batch ---------------------------------------------------------------------------

def _manifest(entries: list[dict], scale: float, seed: int) -> str:
    # the synthetic column carries the generator and its seed into the catalog and every release's card
    made_by = f"pipeline.synthetic.batch scale={scale:g} seed={seed}"
    lines = ["sample_id,scenario,video,participants,subtitles,speaking_order,synthetic"]
    for e in entries:
        # no speaking-order hint: the therapist does not open these interviews (corpus row 1 is a client)
        lines.append(f"{e['sample_id']},{e['scenario']},{e['video']},{';'.join(e['participants'])},{e['subtitles']},,"
                     f"{made_by}")
    return "\n".join(lines) + "\n"


def generate_batch(root: DataRoot, name: str, scale: float, seed: int = 0, max_rows: int | None = None,
                   jobs: int | None = None, on_done: Callable[[str], None] | None = None) -> BatchResult:
    """Write the batch into ``<data root>/batches/<name>/`` (must not hold a batch yet).
    ``jobs`` interviews are rendered at once (default: one per core, at most 4); ``on_done`` is
    called with each finished sample id (a progress bar)."""
    folder = root.batches_dir() / check_name(name, "batch name")
    if folder.exists() and any(folder.iterdir()):
        raise BatchError(f"{folder}: already holds files; give another batch name or remove it")
    plans = plan_batch(scale, seed, max_rows)
    folder.mkdir(parents=True, exist_ok=True)
    jobs = jobs or min(4, os.cpu_count() or 1)

    def one(plan: Planned) -> dict:
        entry = render_one(plan, folder, seed)
        if on_done:
            on_done(plan.sample["sample_id"])
        return entry

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        entries = list(pool.map(one, plans))  # manifest order = plan order, whatever finishes first
    manifest = atomic_write_text(folder / "manifest.csv", _manifest(entries, scale, seed))
    annotators = simulated_annotators(seed)
    usable = [e for e in entries if not e["fault"]]
    totals = {"interviews": len(entries), **{scn: sum(e["scenario"] == scn for e in entries) for scn in corpus.SHAPES},
              "rows": sum(len(e["rows"]) for e in entries),
              "therapist_rows": sum(r["primary_speaker"] == taxonomy.THERAPIST for e in entries for r in e["rows"]),
              "minutes": round(sum(e["duration_s"] for e in entries) / 60, 2),
              "faults": {k: sum(1 for e in entries if e["fault"] and e["fault"]["kind"] == k) for k in FAULTS},
              "interruptions": sum(e["interruptions"] for e in entries),
              "overlapped_backchannels": sum(e["overlapped_backchannels"] for e in entries),
              "backchannels": sum(len(r["background_dialogue"]) for e in entries for r in e["rows"])}
    truth = {"generator": "pipeline.synthetic.batch", "scale": scale, "seed": seed, "max_rows": max_rows,
             "spec": spec_totals(scale), "totals": totals,
             "annotators": [{"name": a.name, "seed": a.seed, "error_rates": dict(a.error_rates)} for a in annotators],
             "expected_agreement": expected_agreement(usable, annotators), "interviews": entries}
    truth_path = atomic_write_text(folder / "truth.json", json.dumps(truth, indent=1, ensure_ascii=False) + "\n")
    return BatchResult(folder, manifest, truth_path, totals)
