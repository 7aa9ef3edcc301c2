"""A synthetic corpus in the RESCUE sample shape, at the paper's scale or any multiple.

At ``scale=1`` it has the paper's Table 3 shape: 191 samples (174 couple, 17 family), 7,079
rows (5,875 / 1,204), therapist turn share 35.4% / 47.1%, total durations 824.9 / 239.9
minutes. Labels are skewed as the paper reports (spec §6.2): couple relation patterns led by
pursue_withdraw (38.7%) and repair_softening (27.0%), family by cooperative_family_alliance
(41.9%); about 38% of therapist rows without a strategy; about 77% / 93% of therapist rows
with a relation label. The text is word salad: the corpus exists to exercise and time the
pipeline (release builds, benchmarks, the demo), never to train on.

Deterministic: the same (scale, seed) gives the same samples; each sample has its own
random stream, so samples do not shift when the scale changes. Samples are valid under
V1-V12 (tests check it with ``pipeline.validate``). :func:`load_synthetic` wraps it as a
release input.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from pipeline import taxonomy
from pipeline.benchmark.release import ReleaseInput
from pipeline.taxonomy import THERAPIST


@dataclass(frozen=True)
class ScenarioShape:
    samples: int
    rows: int
    therapist_share: float
    minutes: float
    relation_filled: float  # share of therapist rows with a non-empty relation label
    strategy_filled: float  # share of therapist rows with a support strategy
    min_rows: int
    max_rows: int
    group_size: tuple[int, int]  # samples per couple / family
    participants: tuple[int, ...]  # choices for the number of clients


SHAPES = {
    "couple": ScenarioShape(174, 5875, 0.354, 824.9, 0.773, 0.62, 16, 52, (6, 12), (2,) * 9 + (3,)),
    "family": ScenarioShape(17, 1204, 0.471, 239.9, 0.926, 0.61, 44, 98, (2, 5), (3, 3, 3, 4)),
}

# Label weights from the paper's reported skew (spec §6.2); names are checked against the
# taxonomy below so a taxonomy change fails loudly here instead of drifting silently.
RELATION_WEIGHTS = {
    "couple": {"pursue_withdraw": .387, "repair_softening": .27, "constructive_alignment": .14,
               "attack_attack": .11, "mixed_transition": .05, "withdraw_withdraw": .043},
    "family": {"cooperative_family_alliance": .419, "boundary_hierarchy_strain": .16, "repair_softening": .13,
               "escalation_conflict": .08, "pursue_withdraw": .07, "cross_generational_coalition": .06,
               "mutual_disengagement": .045, "mixed_transition": .036},
}
STRATEGY_WEIGHTS = {
    "couple": {"reframe": .24, "evoke": .20, "track": .18, "goal_align": .154, "counterbalance": .07, "join": .06,
               "detach": .04, "enact": .025, "repair": .02, "safeguard": .011},
    "family": {"reframe": .24, "join": .20, "counterbalance": .17, "track": .16, "boundary": .132, "enact": .04,
               "repair": .033, "safeguard": .025},
}
for _scn in taxonomy.SCENARIOS:
    assert set(RELATION_WEIGHTS[_scn]) == set(taxonomy.relation_patterns(_scn)), f"relation weights vs taxonomy ({_scn})"
    assert set(STRATEGY_WEIGHTS[_scn]) == set(taxonomy.support_strategies(_scn)), f"strategy weights vs taxonomy ({_scn})"

NAMES = ("Alan Evelyn Dale India Marco Priya Tom Lena Sam Rosa Victor Nadia Owen Grace Felix Mara Jonah Ivy Theo Hana "
         "Rafael Clara Ben Yusuf Amara Leo Noor Eli Sofia Kai Lucia Omar Tess Hugo Mina Ravi Zoe Ezra Lila Jude").split()
SURNAMES = "Moreno Patel Okafor Lindqvist Nakamura Brennan Haddad Kowalski Ferreira Ibsen".split()
WORDS = ("I you we he she it feel think know want never always just really like that this because but and so "
         "when what why how it's don't can't I'm you're trying hard again time love trust change better worse "
         "listen talk hear care home work kids money family feel felt hurt angry tired scared alone together "
         "honest fair wrong right enough more less still maybe sometimes everything nothing something").split()
TONES = ("resigned and heavy", "defensive and frustrated", "soft and hesitant", "firm, slightly defensive",
         "warm and steady", "flat and withdrawn", "pressured and fast", "tearful", "calm and curious")
EMOTIONS = ("feels unheard and frustrated", "feels anxious about the future", "feels ashamed and cornered",
            "feels hopeful but wary", "feels hurt and dismissed", "feels tired and resigned", "feels defensive")
VIEWS = (("she never listens to what I need", "blaming and resentful"),
         ("he shuts down whenever it gets hard", "disappointed and mistrustful"),
         ("they are trying their best", "warm and appreciative"),
         ("he cannot be trusted with the truth", "guarded and critical"))
UTTERANCE_WEIGHTS = (.16, .13, .2, .08, .14, .08, .06, .05, .06, .04)  # in taxonomy order
POSTURES = ("leaning forward", "sitting back, rigid", "hunched, looking down", "turned away slightly")


def _pick(rng: random.Random, weights: dict[str, float]) -> str:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def _partition(rng: random.Random, total: int, n: int, lo: int, hi: int) -> list[int]:
    """n integers in [lo, hi] summing exactly to total (total must be feasible)."""
    sizes = [rng.randint(lo, hi) for _ in range(n)]
    diff = total - sum(sizes)
    while diff:
        i = rng.randrange(n)
        step = 1 if diff > 0 else -1
        if lo <= sizes[i] + step <= hi:
            sizes[i] += step
            diff -= step
    return sizes


def _text(rng: random.Random, lo: int, hi: int) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(lo, hi))]
    return (" ".join(words).capitalize() + ".") if words else "Yeah."


def _sample(scenario: str, sample_id: str, group: str, clients: list[str], n_rows: int, n_therapist: int,
            seconds_per_row: float, shape: ScenarioShape, rng: random.Random) -> dict:
    group_label = taxonomy.group_label(scenario)
    positions = set(rng.sample(range(2, n_rows + 1), n_therapist))  # row 1 is a client
    utterance_types = taxonomy.utterance_types()
    t, rows, relation = 0.0, [], None
    for k in range(1, n_rows + 1):
        t += round(rng.uniform(0.0, 0.6), 2)
        start = round(t, 2)
        t = start + max(0.5, round((seconds_per_row - 0.3) * rng.uniform(0.5, 1.5), 2))  # mean gap 0.3 s
        end = round(t, 2)
        therapist = k in positions
        row = {"start_time": start, "end_time": end, "row_index": k, "background_dialogue": [], "body_posture": [],
               "facial_expressions": [], "self_directed_behavior": [], "interaction_behavior": [],
               "internal_emotion": [], "viewpoints_attitudes": [], "support_strategy": [],
               "tone_of_voice": rng.choice(TONES), "relation_cycle_state": None, "relation_cycle_reason": None,
               "relation_cycle_evidence_rows": None}
        if therapist:
            speaker = THERAPIST
            target = [group_label] if rng.random() < 0.2 else [rng.choice(clients)]
            row.update(primary_speaker=speaker, target=target, utterance_type="", dialogue_cleaned=_text(rng, 1, 28))
            if rng.random() < shape.strategy_filled:
                row["support_strategy"] = [{"provider": THERAPIST, "target": list(target),
                                            "strategy_type": _pick(rng, STRATEGY_WEIGHTS[scenario]),
                                            "strategy_content": "Therapist " + _text(rng, 4, 12).lower()}]
            if rng.random() < shape.relation_filled:
                # sticky chain whose stationary distribution is the weights: runs like real data
                if relation is None or rng.random() > 0.55:
                    relation = _pick(rng, RELATION_WEIGHTS[scenario])
                state = relation
            else:
                state = ""
            row["relation_cycle_state"] = state
            row["relation_cycle_reason"] = ("The interaction is organized around " + state.replace("_", " ")) if state \
                else "No clear dyadic organization is active in the moment."
            row["relation_cycle_evidence_rows"] = list(range(max(0, k - 3), min(n_rows, k + 1)))
            if rng.random() < 0.05:
                row["internal_emotion"] = [{"person": rng.choice(clients), "emotion_description": rng.choice(EMOTIONS),
                                            "intensity": rng.randint(4, 8)}]
        else:
            speaker = rng.choice(clients)
            others = [c for c in clients if c != speaker]
            target = [THERAPIST] if rng.random() < 0.75 else [rng.choice(others)]
            short = rng.random() < 0.15
            row.update(primary_speaker=speaker, target=target,
                       utterance_type=rng.choices(utterance_types, weights=UTTERANCE_WEIGHTS)[0],
                       dialogue_cleaned=_text(rng, 1, 3) if short else _text(rng, 5, 40))
            if rng.random() < 0.1:
                row["background_dialogue"] = [{"speaker": THERAPIST, "target": [speaker], "content": "Yeah, yeah."}]
            if rng.random() < 0.88:
                row["internal_emotion"] = [{"person": speaker, "emotion_description": rng.choice(EMOTIONS),
                                            "intensity": rng.randint(4, 8)}]
            if rng.random() < 0.5:
                view, attitude = rng.choice(VIEWS)
                row["viewpoints_attitudes"] = [{"source": speaker, "target": rng.choice(others), "viewpoint": view,
                                                "attitude": attitude}]
            if rng.random() < 0.4:
                row["interaction_behavior"] = [{"initiator": speaker, "target": list(target),
                                                "description": "looks toward " + target[0]}]
        if rng.random() < 0.5:
            row["body_posture"] = [{"person": speaker, "description": rng.choice(POSTURES)}]
        if rng.random() < 0.4:
            row["facial_expressions"] = [{"person": speaker, "description": "brow furrowed"}]
        rows.append(row)
    return {"sample_id": sample_id, "scenario": scenario, "participants": clients, "group_id": group,
            "source_file": f"synthetic/{sample_id}.json", "duration_s": round(t + rng.uniform(0.5, 3.0), 2), "rows": rows}


def _scenario(scenario: str, scale: float, seed: int) -> list[dict]:
    shape = SHAPES[scenario]
    n_samples = max(1, round(shape.samples * scale))
    # Exact totals at scale 1 (and proportional otherwise), clipped to what the bounds allow.
    total_rows = min(max(round(shape.rows * scale), n_samples * shape.min_rows), n_samples * shape.max_rows)
    plan = random.Random(f"{seed}:{scenario}:plan")
    sizes = _partition(plan, total_rows, n_samples, shape.min_rows, shape.max_rows)
    therapist_total = round(total_rows * shape.therapist_share)
    # Therapist rows per sample, proportional to length, exact sum (at least 2 clients rows each).
    therapist = [int(s * shape.therapist_share) for s in sizes]
    order = sorted(range(n_samples), key=lambda i: (sizes[i] * shape.therapist_share - therapist[i], -i), reverse=True)
    for i in order[: therapist_total - sum(therapist)]:
        therapist[i] += 1
    seconds_per_row = shape.minutes * 60 / shape.rows

    samples, i = [], 0
    group_no = 0
    while i < n_samples:
        grng = random.Random(f"{seed}:{scenario}:group{group_no}")
        size = min(grng.randint(*shape.group_size), n_samples - i)
        if scenario == "couple":
            a, b = grng.sample(NAMES, 2)
            clients = [a, b] + ([grng.choice([n for n in NAMES if n not in (a, b)])]
                                if grng.choice(shape.participants) == 3 else [])
            group = f"{a.lower()}_and_{b.lower()}_{group_no:03d}"
        else:
            clients = grng.sample(NAMES, grng.choice(shape.participants))
            group = f"family_therapy/{grng.choice(SURNAMES).lower()}_family_{group_no:03d}"
        for j in range(size):
            rng = random.Random(f"{seed}:{scenario}:sample{i}")
            stem = f"{j + 1:03d}_s{group_no % 9 + 1:02d}e{j // 3 + 1:02d}_ct{rng.randint(10, 99)}_segment{j % 6 + 1:02d}"
            samples.append(_sample(scenario, f"{group}/{stem}", group, clients, sizes[i], therapist[i],
                                   seconds_per_row, shape, rng))
            i += 1
        group_no += 1
    return samples


def generate(scale: float = 1.0, seed: int = 0) -> list[dict]:
    """The synthetic corpus: ``round(191 * scale)`` samples, couples first (sorted by sample_id)."""
    if scale <= 0:
        raise ValueError(f"scale must be positive, got {scale}")
    out = [s for scenario in taxonomy.SCENARIOS for s in _scenario(scenario, scale, seed)]
    return sorted(out, key=lambda s: s["sample_id"])


def load_synthetic(scale: float = 1.0, seed: int = 0) -> ReleaseInput:
    """The synthetic corpus as a release input (``rescue release build --synthetic``, the
    ``build-release`` flow's ``synthetic[:scale]`` source); the manifest names generator and seed."""
    return ReleaseInput(generate(scale=scale, seed=seed), {"kind": "synthetic", "generator": "pipeline.synthetic.corpus",
                                                           "scale": scale, "seed": seed})
