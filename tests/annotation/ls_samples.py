"""Samples and the headless browser for the annotation tests: the release's first three samples
when the shared copy is present, else (and in addition) small generated ones. Generated text is
neutral filler."""
from __future__ import annotations

import json
import random
from pathlib import Path

from pipeline.config import REPO_ROOT

CHROMIUM = "/usr/bin/chromium"  # Debian's (scripts/setup.sh installs it)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# for pages whose players are tested (the flag only spares a user-gesture check; the play button is clicked)
PLAYER_ARGS = [*CHROMIUM_ARGS, "--autoplay-policy=no-user-gesture-required"]
SCREENSHOTS = REPO_ROOT / "test-output" / "screenshots"
BENCHMARK_HEAD = Path("/work/shared/data/rescue/benchmark_head.jsonl")
UTTERANCE_TYPES = ("disclosure", "accusation", "defense", "request", "recollection")


def release_head() -> list[dict]:
    if not BENCHMARK_HEAD.is_file():
        return []
    return [json.loads(line) for line in BENCHMARK_HEAD.read_text(encoding="utf-8").splitlines() if line.strip()]


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


def browser_login(page, base: str, email: str, password: str, timeout_ms: float | None = None) -> None:
    """Log ``page`` (a Playwright page) in through Label Studio's login form at ``base`` (the
    desk or its front), as an annotator does; ``timeout_ms`` None: the page's default."""
    page.goto(f"{base}/user/login/")
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/user/login" not in url, timeout=timeout_ms)
