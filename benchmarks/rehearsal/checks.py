"""The checks against the batch's truth.json: the machine half's (``check``: drafts, quarantines,
rows) and the human half's (``human_checks``: the release, gold against the truth, each
field's alpha against the simulated answers' own and against the alpha the error rates imply);
a release compared with a reference release, file by file and cell by cell, and which half a
difference came from."""
from __future__ import annotations

import contextlib
import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from .simulation import person_email, simulated_annotators, truth_samples

def check(truth: dict, result: dict | None, data) -> dict:
    """The machine half's checks against truth.json."""
    import pyarrow.parquet as pq

    items = (result or {}).get("items", {})
    quarantined = (result or {}).get("quarantined", {})
    accounted, bad_files, good_q, rows_bad = [], [], [], []
    counts = {"interviews": len(truth["interviews"]), "drafted": 0, "quarantined": len(quarantined),
              "planted": 0, "rows_drafted": 0, "rows_truth_of_drafted": 0, "rows_truth": truth["totals"]["rows"],
              "turns": 0}
    for e in truth["interviews"]:
        sid, item = e["sample_id"], items.get(e["sample_id"])
        drafts = data.drafts(sid)
        if item and item["status"] in ("done", "cached") and drafts.is_file():
            counts["drafted"] += 1
            n = pq.read_metadata(drafts).num_rows
            counts["rows_drafted"] += n
            counts["rows_truth_of_drafted"] += len(e["rows"])
            if n != len(e["rows"]):
                rows_bad.append(f"{sid}: {n} draft rows, truth {len(e['rows'])}")
            with contextlib.suppress(OSError):
                counts["turns"] += sum(1 for ln in data.rttm(sid).read_text().splitlines() if ln.startswith("SPEAKER"))
        elif item and item["status"] == "quarantined" and quarantined.get(sid, "").strip():
            pass
        else:
            accounted.append(f"{sid}: neither drafts nor a quarantine with its reason "
                             f"({item['status'] if item else 'not in the batch result'})")
        fault = e.get("fault")
        reason = quarantined.get(sid, "")
        if fault:
            counts["planted"] += 1
            bad = e["video"] if fault["kind"] == "corrupt_video" else e["subtitles"]
            if sid not in quarantined:
                bad_files.append(f"{sid}: planted {fault['kind']} ({bad}) was not quarantined")
            elif bad not in reason or fault["reason_contains"] not in reason:
                bad_files.append(f"{sid}: planted {fault['kind']}: the reason does not name {bad!r} and "
                                 f"{fault['reason_contains']!r}: {reason}")
        elif sid in quarantined:
            good_q.append(f"{sid}: quarantined without a planted fault: {reason}")
    extra = sorted(set(items) - {e["sample_id"] for e in truth["interviews"]})
    if extra:
        accounted.append(f"not in truth.json: {', '.join(extra)}")
    return {
        "accounted": {"ok": not accounted and result is not None, "problems": accounted or
                      ([] if result is not None else ["no batch result"])},
        "bad_files": {"ok": not bad_files and result is not None, "problems": bad_files},
        "good_not_quarantined": {"ok": not good_q and result is not None, "problems": good_q},
        "rows_equal_truth": {"ok": not rows_bad and result is not None and counts["drafted"] > 0, "problems": rows_bad},
        "counts": {"ok": True, **counts},
    }


def human_checks(truth: dict, result: dict | None, data, human: dict | None) -> dict:
    """The human half's checks: the release against truth.json, gold against the truth, and each
    field's measured alpha against the simulated answers' own (``seeded_alphas``) and against the
    alpha the generator's error rates imply."""
    import pyarrow.parquet as pq

    from pipeline.annotation.rounds import load_round
    from pipeline.benchmark.paper_export import read_release_samples

    if not human:
        missing = {"ok": False, "problems": ["no release: the human half did not finish"]}
        return {k: dict(missing) for k in ("release_accounted", "release_rows", "gold_truth", "alpha")}
    released = {s["sample_id"]: s for s in read_release_samples(human["release"])}
    quarantined = (result or {}).get("quarantined", {})
    held = gold_held_back(data)
    accounted, rows_bad = [], []
    for e in truth["interviews"]:
        sid = e["sample_id"]
        if sid in released:
            if len(released[sid]["rows"]) != len(e["rows"]):
                rows_bad.append(f"{sid}: {len(released[sid]['rows'])} rows in the release, truth {len(e['rows'])}")
        elif not (e["fault"] and quarantined.get(sid, "").strip()):
            accounted.append(f"{sid}: not in the release" + (", and not quarantined with a reason" if e["fault"] else
                                                              " (no planted fault)")
                             + (f"; the gold stage held it back: {held[sid]}" if sid in held else ""))
    extra = sorted(set(released) - {e["sample_id"] for e in truth["interviews"]})
    accounted += [f"{sid}: in the release, not in truth.json" for sid in extra]

    # Gold against the truth: where the three annotators gave one value, and where the
    # adjudicator decided. The simulated answers are recomputed (deterministic) to tell a value
    # the annotators all got wrong the same way (a shared error: gold rightly keeps it) from a
    # value the pipeline changed.
    samples, sims = truth_samples(truth), simulated_annotators(truth)
    by_row = {(sid, r["row_index"]): (s, r) for sid, s in samples.items() for r in s["rows"]}
    prov = pq.read_table(data.gold_dir() / "provenance.parquet",
                         columns=["round", "sample_id", "row_index", "field", "method", "value"]).to_pylist()
    rounds, answers, gold_bad = {}, {}, []
    tally = defaultdict(int)
    for line in prov:
        if line["method"] not in ("unanimous", "adjudicated"):
            continue
        rnd = rounds.setdefault(line["round"], load_round(line["round"]))
        f = rnd.field(line["field"])
        sample, row = by_row.get((line["sample_id"], line["row_index"]), (None, None))
        where = f"{line['round']} {line['sample_id']} row {line['row_index']} {line['field']}"
        if row is None:
            gold_bad.append(f"{where}: no such row in the truth")
            continue
        gold, want = _canonical(f, json.loads(line["value"])), _canonical(f, row.get(line["field"]))
        if gold == want:
            tally[f"{line['method']}, equal to the truth"] += 1
            continue
        if line["method"] == "unanimous":
            key = (line["round"], line["sample_id"], line["row_index"])
            if key not in answers:
                answers[key] = [sim.answer_row(rnd, sample, row) for sim in sims.values()]
            given = {_canonical(f, a.get(line["field"])) for a in answers[key]}
            if given == {gold}:
                tally["unanimous, the same wrong answer from all three (kept, as it should be)"] += 1
                continue
        gold_bad.append(f"{where} ({line['method']}): gold {json.loads(line['value'])!r}, "
                        f"truth {row.get(line['field'])!r}")

    # Alpha per field: the round's must be the seeded answers' own (measured without Label Studio),
    # and its bootstrap interval must hold the one the error rates imply.
    alpha_bad, alpha_rows, fields, seeded, seeded_bad = [], [], [], {}, []
    for name in human["rounds"]:
        report = json.loads((data.agreement_report_dir(name) / "agreement.json").read_text())
        expected = truth["expected_agreement"].get(name, {})
        fields += [(name, fa, expected) for fa in report["fields"]]
        problems = data.label_problems(name)
        seeded[name] = seeded_alphas(truth, name, pq.read_table(problems).to_pylist() if problems.is_file() else [])
    judged = sum(not why_not_judged(fa, (expected.get(fa["field"]) or {}).get("alpha")) for _, fa, expected in fields)
    for name, fa, expected in fields:
        exp = (expected.get(fa["field"]) or {}).get("alpha")
        lo, hi = fa.get("ci_low"), fa.get("ci_high")
        own = seeded[name].get(fa["field"])
        if not same_alpha(fa["alpha"], own):
            seeded_bad.append(f"{name}.{fa['field']}: the round measured {fa['alpha']}, the seeded answers give {own}")
        ok, why = alpha_verdict(fa, exp, judged, seeded=own)
        alpha_rows.append({"round": name, "field": fa["field"], "alpha": fa["alpha"], "ci_low": lo, "ci_high": hi,
                           "expected": exp, "exact": (expected.get(fa["field"]) or {}).get("exact"),
                           "seeded": own, "units": fa["n_units"], "ok": ok, "why": why})
        if ok is False:
            alpha_bad.append(f"{name}.{fa['field']}: alpha {fa['alpha']} with interval {lo}-{hi}; "
                             f"the error rates imply {exp}")
    return {
        "release_accounted": {"ok": not accounted, "problems": accounted, "released": len(released)},
        "release_rows": {"ok": not rows_bad and bool(released), "problems": rows_bad,
                         "rows": sum(len(s["rows"]) for s in released.values())},
        "gold_truth": {"ok": not gold_bad and bool(tally), "problems": gold_bad, "tally": dict(tally)},
        "alpha_seeded": {"ok": not seeded_bad and bool(alpha_rows), "problems": seeded_bad,
                         "fields": len(alpha_rows)},
        "alpha": {"ok": not alpha_bad and bool(alpha_rows), "problems": alpha_bad, "fields": alpha_rows,
                  "checked": sum(r["ok"] is not None for r in alpha_rows)},
    }


def gold_held_back(data) -> dict[str, str]:
    """Why the gold stage kept an interview out of the corpus: its first violation (and how many
    it has), or the annotators it still waits for (annotation/gold/)."""
    import pyarrow.parquet as pq

    held: dict[str, str] = {}
    path = data.gold_dir() / "violations.parquet"
    if path.is_file():
        found = defaultdict(list)
        for v in pq.read_table(path).to_pylist():
            found[v["sample_id"]].append(v)
        for sid, vs in found.items():
            v = vs[0]
            row = f" row {v['row_index']}" if v["row_index"] is not None else ""
            held[sid] = f"{len(vs)} violation(s), the first{row}: {v['rule']}: {v['message']}"
    summary = data.gold_dir() / "summary.json"
    if summary.is_file():
        for sid, waits in json.loads(summary.read_text()).get("waiting_for_annotators", {}).items():
            held.setdefault(sid, "waiting for annotators: " + "; ".join(waits))
    return held


def _canonical(f, v):
    """A comparable form of a stored label value: set-valued fields unordered, records by their
    subfields' filled values, text by its words (how the truth and a pulled value may differ in
    form only)."""
    from pipeline.quality.disagreements import value_key

    if f is None:
        return value_key(v)
    if f.type in ("multichoice", "rows"):
        return value_key(sorted(v or [], key=str))
    if f.type == "records":
        return tuple(sorted(value_key({s.name: r.get(s.name) for s in f.subfields
                                       if s.type != "const" and r.get(s.name) not in (None, "", [])})
                            for r in (v or [])))
    if f.type == "text":
        return " ".join((v or "").split())
    return value_key("" if v is None and f.type == "choice" else v)


def why_not_judged(measured: dict, expected: float | None) -> str | None:
    """Why a field's alpha is not judged (see ``alpha_verdict``); None where it is."""
    from pipeline.quality.measures import MIN_UNITS

    if expected is None:
        return "no closed form"
    if (measured.get("n_pairable") or 0) < MIN_UNITS:
        return f"{measured.get('n_pairable') or 0} pairable units, fewer than {MIN_UNITS}: not judged"
    return None


def alpha_verdict(measured: dict, expected: float | None, judged: int = 1,
                  seeded: float | None = None) -> tuple[bool | None, str]:
    """Whether a field's measured alpha (agreement.json's figures) agrees with the alpha the
    error rates imply: the bootstrap 95% interval holds it. Not judged (None) without a closed
    form, or below the agreement report's own floor of pairable units, where a percentile
    bootstrap is no interval at all (5 units all agreeing resample to [1.0, 1.0]).

    With ``judged`` fields judged together, a correct pipeline would put one of nine outside its
    95% interval more than a third of the time; so an expected alpha just outside is judged
    again at family-wise 95% (Bonferroni: each interval widened to 1 - 0.05/judged, from the 95%
    one by the ratio of the normal quantiles), and passes there, saying so.

    ``seeded``: the alpha of the same seeded answers measured without Label Studio
    (``seeded_alphas``). Outside even so, the field passes, saying so, when the round gave exactly
    that alpha: the answers themselves are an unlikely draw (the theory is their mean over draws),
    and the round trip through the desks lost or changed nothing of them."""
    from statistics import NormalDist

    lo, hi = measured.get("ci_low"), measured.get("ci_high")
    not_judged = why_not_judged(measured, expected)
    if not_judged:
        return None, not_judged
    if lo is None or hi is None:
        return False, "no interval measured"
    if lo <= expected <= hi:
        return True, "inside"
    z = NormalDist().inv_cdf
    widen, alpha = z(1 - 0.025 / max(judged, 1)) / z(0.975), measured["alpha"]
    wide_lo, wide_hi = alpha - (alpha - lo) * widen, alpha + (hi - alpha) * widen
    if judged > 1 and wide_lo <= expected <= wide_hi:
        return True, f"inside at family-wise 95% over {judged} fields: [{wide_lo:.3f}, {wide_hi:.3f}]"
    if seeded is not None and same_alpha(alpha, seeded):
        return True, (f"outside, and the seeded answers measured without Label Studio give the same "
                      f"{seeded:.3f}: an unlikely draw of the answers, nothing changed on the way")
    return False, "OUTSIDE"


def same_alpha(measured: float | None, seeded: float | None) -> bool:
    """The same answers coded by the same code: the same alpha, up to float summation order."""
    if measured is None or seeded is None:
        return measured is None and seeded is None
    return abs(measured - seeded) <= 1e-9


def seeded_alphas(truth: dict, round_name: str, refused: Sequence[dict] = ()) -> dict[str, float]:
    """Each field's alpha of the simulated annotators' own answers on the truth's rows (the
    interviews without a planted fault), measured by the pipeline's agreement code straight from
    the simulation, without Label Studio: what a round that loses or changes no answer measures.
    ``refused``: the pull's problem lines (``DataRoot.label_problems``): the answers they name by
    row and field are left out, as the pull leaves them out of the label table (a self-target,
    say), each with its reason; a task's notes (submitted twice: the latest is used) name none."""
    import pyarrow as pa

    from pipeline.annotation.rounds import load_round
    from pipeline.quality.measures import round_agreement
    from pipeline.synthetic.annotators import simulate_labels

    rnd, sims = load_round(round_name), simulated_annotators(truth)
    labels = simulate_labels(rnd, list(truth_samples(truth).values()), [sims[e] for e in sorted(sims)])
    # the desks' lines name the annotator by e-mail, the simulation's by name
    out = {(p["sample_id"], p["row_index"], p["annotator"], p["field"].split(".", 1)[0]) for p in refused
           if p.get("row_index") is not None and p.get("field")}  # not a task's note ("the latest is used")
    if out:
        labels = pa.Table.from_pylist([ln for ln in labels.to_pylist() if (ln["sample_id"], ln["row_index"],
                                       person_email(ln["annotator"]), ln["field"]) not in out], schema=labels.schema)
    return {f.field: f.alpha for f in round_agreement(labels, round_name, rnd).fields}


def compare_releases(built: Path, reference: Path) -> list[str]:
    """Files that differ between two releases (the time an agreement override was recorded,
    which the manifest and card carry, masked: ``release_files.comparable_files``)."""
    from pipeline.benchmark.release_files import comparable_files

    a, b = comparable_files(built), comparable_files(reference)
    if not b:
        return [f"{reference}: no release there"]
    differ = [n for n in sorted(set(a) & set(b)) if a[n] != b[n]]
    cells = _row_cells_that_differ(built, reference) if any(n.startswith("data/rows/") for n in differ) else []
    return ([f"only in this run's release: {n}" for n in sorted(set(a) - set(b))]
            + [f"only in the reference: {n}" for n in sorted(set(b) - set(a))]
            + [f"differs: {n}" for n in differ] + cells)


def _row_cells_that_differ(built: Path, reference: Path, first: int = 12) -> list[str]:
    """The first cells of the rows table that differ, with both values: what a faulted run
    changed, readable without the two releases at hand."""
    from pipeline.benchmark.release_files import read_config

    def rows(release: Path) -> dict[tuple, dict]:
        return {(r["sample_id"], r["row_index"]): r for r in read_config(release, "rows").to_pylist()}

    try:
        mine, ref = rows(built), rows(reference)
    except Exception as exc:  # noqa: BLE001 - a broken release: the file list above says enough
        return [f"  the rows tables cannot be compared cell by cell: {type(exc).__name__}: {exc}"]
    out = [f"  row {k[0]} #{k[1]}: only in {'this run' if k in mine else 'the reference'}"
           for k in sorted(set(mine) ^ set(ref))]
    for k in sorted(set(mine) & set(ref)):
        out += [f"  row {k[0]} #{k[1]} {c}: this run {mine[k][c]!r}, reference {ref[k].get(c)!r}"
                for c in mine[k] if mine[k][c] != ref[k].get(c)]
    return out[:first] + ([f"  ... {len(out) - first} more cells"] if len(out) > first else [])


def machine_half_files(data, batch: Path) -> dict[str, str]:
    """sha256 of what the machine half started from and made: the generated batch's files, each
    interview's transcript, RTTM and draft rows (read before the rounds)."""
    from pipeline.store import sha256_file

    folders = {"batch": batch, "transcripts": data.root / "transcripts", "diarization": data.root / "diarization",
               "drafts": data.drafts_dir()}
    return {f"{prefix}/{path.relative_to(folder).as_posix()}": sha256_file(path)
            for prefix, folder in folders.items() for path in sorted(folder.rglob("*")) if path.is_file()}


def batch_copy(release: Path) -> Path:
    """Where ``--save-release DIR`` keeps the generated batch (DIR.batch), which a run with
    ``--reference DIR`` takes as its own instead of generating one: the two runs then start from
    the same bytes, so a release difference is the faults' (or the pipeline's), never the
    generator's. (The generator has given other speech timings for the same seed twice, each
    time in a session's first rehearsal: sessions 22 and 23, docs/SCALING.md.)"""
    return release.with_name(release.name + ".batch")


def machine_record(release: Path) -> Path:
    """Where ``--save-release DIR`` keeps the machine half's files (beside the release, not in it)."""
    return release.with_name(release.name + ".machine.json")


def which_half(machine: dict[str, str], record: Path) -> list[str]:
    """For a release that differs from the reference: did the machine half already differ (the
    generated batch, a transcript, an RTTM, a draft), or only what the rounds made of it?"""
    if not record.is_file():
        return [f"  (no {record.name} beside the reference: which half differs is not known)"]
    ref = json.loads(record.read_text())
    moved = sorted(n for n in set(machine) | set(ref) if machine.get(n) != ref.get(n))
    if not moved:
        return ["  the generated batch, every transcript, RTTM and draft equal the reference's: the difference came "
                "in the rounds (the human half)"]
    where = {n: " (only in this run)" for n in set(machine) - set(ref)} | {n: " (only in the reference)"
                                                                             for n in set(ref) - set(machine)}
    return [f"  machine half differs: {n}{where.get(n, '')}" for n in moved]
