"""The oracle: the generated family interview the bench pushes, the answers its annotator means
for each field (``answers``, ``voice_names``), and the judge of what a desk stored against them
(``wrong_answers``)."""
from __future__ import annotations

import random

from pipeline.annotation import ls_config, naming, push, voice_naming

WORDS = ("the week was long and nobody listened when I tried to say how tired I am of the same "
         "argument about money school the kids and who calls whom first after work").split()


def family_sample(n_rows: int, seed: int = 0) -> dict:
    """A generated family interview (``pipeline.rows`` shape) with plausible answers per row."""
    rng = random.Random(seed)
    people = ["Cara Miller", "Dan Miller", "Eli Miller"]
    rows, t = [], 0.0
    for i in range(1, n_rows + 1):
        speaker = "Therapist" if i % 3 == 0 else people[rng.randrange(3)]
        others = [p for p in people + ["Therapist"] if p != speaker]
        target = ["Family"] if speaker == "Therapist" and i % 2 else [rng.choice(others)]
        dur = round(rng.uniform(1.5, 6.0), 2)
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 24)))
        row = {"row_index": i, "start_time": round(t, 2), "end_time": round(t + dur, 2),
               "primary_speaker": speaker, "target": target, "dialogue_cleaned": text, "background_dialogue": []}
        if speaker != "Therapist":
            row["utterance_type"] = rng.choice(["disclosure", "accusation", "defense", "recollection", "request"])
            row["tone_of_voice"] = rng.choice(["flat", "warm", "tense and quick", "raised"])
            row["internal_emotion"] = [{"person": speaker, "emotion_description": "feels unheard",
                                        "intensity": rng.randint(2, 8)}]
            row["viewpoints_attitudes"] = [] if i % 4 == 1 else [
                {"source": speaker, "target": rng.choice([p for p in people if p != speaker]),
                 "viewpoint": "does not listen", "attitude": "frustrated"}]
        else:
            row["relation_cycle_state"] = rng.choice(["", "pursue_withdraw", "escalation_conflict"])
            row["relation_cycle_reason"] = f"the exchange before row {i} shows it"
            row["relation_cycle_evidence_rows"] = sorted({max(0, i - 3), i - 2})
            row["support_strategy"] = [] if i % 2 else [
                {"provider": "Therapist", "target": ["Family"], "strategy_type": rng.choice(["track", "reframe"]),
                 "strategy_content": "names the pattern"}]
        rows.append(row)
        t += dur + 0.3
    return {"sample_id": f"bench/family_{n_rows:03d}", "scenario": "family", "participants": people, "rows": rows}


def voice_table(sample: dict) -> list[dict]:
    """The sample's voice table (``schemas.DRAFT_VOICES``) as the segmenter writes it when the
    manifest's speaking-order hint named every voice: each voice labelled with its person's name,
    so "Who is each voice?" comes with every name pre-filled (a proposal to accept)."""
    out = []
    for r in sample["rows"]:
        voice = r["primary_speaker"]
        if any(v["voice"] == voice for v in out):
            continue
        own = [x for x in sample["rows"] if x["primary_speaker"] == voice]
        out.append({"sample_id": sample["sample_id"], "voice": voice, "diarization_speaker": f"SPEAKER_{len(out):02d}",
                    "named_by": "role" if voice == "Therapist" else "order",
                    "first_rows": [x["row_index"] for x in own[:3]], "sample_start": own[0]["start_time"],
                    "sample_end": own[0]["end_time"], "n_rows": len(own),
                    "speech_s": round(sum(x["end_time"] - x["start_time"] for x in own), 2)})
    return out


def voice_names(sample: dict, truth: dict[int, dict]) -> dict[str, str]:
    """Who each voice of the sample's draft is by the oracle: the speaker most of its rows have
    (the rule of ``voice_naming.name_background``)."""
    votes: dict[str, dict[str, int]] = {}
    for r in sample["rows"]:
        name = (truth.get(r["row_index"]) or {}).get("primary_speaker")
        if name:
            count = votes.setdefault(r["primary_speaker"], {})
            count[name] = count.get(name, 0) + 1
    return {v: max(c, key=lambda n: c[n]) for v, c in votes.items()}


def answers(rnd, sample: dict) -> dict[int, dict]:
    """The benchmark annotator's answers: the generated values; in the transcript round one
    line in four is corrected (the draft text differs from what is said)."""
    values = push.input_values(rnd, sample)
    if rnd.name == "transcript":
        for ri, row in values.items():
            if ri % 4 == 0:
                row["dialogue_cleaned"] = row["dialogue_cleaned"] + " really"
    return values



def stored_same(have, want) -> bool:
    """A stored value (Label Studio's result value) equals the oracle's."""
    if isinstance(want, list) or isinstance(have, list):
        return sorted(map(str, have or [])) == sorted(map(str, want or []))
    if isinstance(want, (int, float)) and not isinstance(want, bool):
        try:
            return float(have) == float(want)
        except (TypeError, ValueError):
            return False
    return (have or "") == (want or "")


def wrong_answers(rnd, exported: list[dict], truth: dict[int, dict],
                  voices: dict[str, str] | None = None) -> tuple[int, int, list[str]]:
    """What the desk stored against the oracle: every field the oracle means for a submitted
    window that the window's newest annotation holds otherwise (or not at all), every row
    field stored that the oracle leaves empty, and every voice of "Who is each voice?" named
    otherwise than ``voices`` (the oracle's names, :func:`voice_names`). A row left on its voice
    (``voice:<label>``) holds the name that voice got in its sample's block (part 1). Returns
    (wrong, windows with an annotation, a few examples "task field: stored != meant")."""
    wrong, done, examples = 0, 0, []
    newest: list[tuple[dict, dict]] = []
    named: dict[str, dict[str, str]] = {}  # sample -> voice -> the name its block stored
    for task in exported:
        kept = [a for a in task.get("annotations") or [] if not a.get("was_cancelled")]
        if not kept:
            continue
        done += 1
        stored = {r["from_name"]: ls_config.result_value(r) for r in max(kept, key=lambda a: a["id"])["result"]
                  if r.get("from_name")}
        newest.append((task, stored))
        for i, v in enumerate(task["data"].get(voice_naming.VOICES_KEY) or []):
            have, want = stored.get(voice_naming.CHOICE_NAME.format(v=i)), (voices or {}).get(v["voice"])
            if isinstance(have, list) and len(have) == 1:
                named.setdefault(task["data"].get("sample_id"), {})[v["voice"]] = have[0]
            if want is not None and have != [want]:
                wrong += 1
                if len(examples) < 5:
                    examples.append(f"task {task['id']} voice {v['voice']!r}: {have!r} != {[want]!r}")
    for task, stored in newest:
        names_of = named.get(task["data"].get("sample_id")) or {}

        def named_as(value):  # a row left on its voice: that voice's name
            if not isinstance(value, list):
                return value
            out = [names_of.get(x[len(voice_naming.TOKEN):], x) if isinstance(x, str) and x.startswith(voice_naming.TOKEN)
                   else x for x in value]
            return [x for i, x in enumerate(out) if x not in out[:i]]

        meant = {r["from_name"]: ls_config.result_value(r) for r in ls_config.values_to_results(rnd, task["data"], truth)}
        names = set(meant) | {n for n in stored if naming.parse_control_name(n) and not ls_config.is_prefill_control(n)}
        for name in sorted(names):
            have, want = named_as(stored.get(name)), meant.get(name)
            if want is None and have in (None, "", []):
                continue
            if not stored_same(have, want):
                wrong += 1
                if len(examples) < 5:
                    examples.append(f"task {task['id']} {name}: {have!r} != {want!r}")
    return wrong, done, examples
