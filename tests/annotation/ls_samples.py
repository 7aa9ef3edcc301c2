"""Samples for the annotation tests: small generated ones in the ``pipeline.rows`` shape (their
text is neutral filler), and the release's first three samples where the shared copy is present.
The browser set-up these tests share is in tests/helpers.py."""
from __future__ import annotations

import random
import warnings

from tests.helpers import BENCHMARK_HEAD, benchmark_head_records

UTTERANCE_TYPES = ("disclosure", "accusation", "defense", "request", "recollection")


def release_head() -> list[dict]:
    """The release head's samples, to run beside generated ones; where ../shared is absent, none,
    with a warning saying so (the generated ones still run). A test of the real data alone takes
    the ``benchmark_head_path`` fixture, which skips."""
    if not BENCHMARK_HEAD.is_file():
        warnings.warn(f"{BENCHMARK_HEAD} is absent: only generated samples are used", stacklevel=2)
        return []
    return benchmark_head_records()


def make_sample(sample_id: str, scenario: str = "couple", n_rows: int = 12, seed: int = 0) -> dict:
    """A sample in the ``pipeline.rows`` shape with draft-like values (speaker, target, text)."""
    rng = random.Random(f"{sample_id}/{seed}")
    participants = ["Ann", "Ben"] if scenario == "couple" else ["Cara", "Dan", "Eli"]
    group = "Couple" if scenario == "couple" else "Family"
    rows, t = [], 0.0
    for i in range(1, n_rows + 1):
        speaker = "Therapist" if i % 3 == 0 else participants[i % len(participants)]
        others = [p for p in participants + ["Therapist"] if p != speaker]
        target = [group] if speaker == "Therapist" and i % 2 else [rng.choice(others)]
        dur = round(rng.uniform(1.0, 4.0), 2)
        row = {"row_index": i, "start_time": round(t, 2), "end_time": round(t + dur, 2),
               "primary_speaker": speaker, "target": target,
               "dialogue_cleaned": f"line {i} spoken by {speaker.lower()} about the week",
               "background_dialogue": []}
        if speaker != "Therapist":
            row["utterance_type"] = rng.choice(UTTERANCE_TYPES)
            row["tone_of_voice"] = rng.choice(["flat", "warm", "tense and quick"])
            row["internal_emotion"] = [{"person": speaker, "emotion_description": "feels unheard",
                                        "intensity": rng.randint(0, 10)}]
            row["viewpoints_attitudes"] = [{"source": speaker, "target": rng.choice(others),
                                            "viewpoint": "does not listen", "attitude": "frustrated"}]
        else:
            row["relation_cycle_state"] = rng.choice(["", "pursue_withdraw", "mixed_transition"])
            row["relation_cycle_reason"] = f"reason for row {i}"
            row["relation_cycle_evidence_rows"] = sorted({max(0, i - 3), i - 1})
            row["support_strategy"] = [] if i % 2 else [
                {"provider": "Therapist", "target": [group], "strategy_type": rng.choice(["track", "reframe"]),
                 "strategy_content": "names the pattern"}]
        rows.append(row)
        t += dur + 0.3
    return {"sample_id": sample_id, "scenario": scenario, "participants": participants, "rows": rows}
