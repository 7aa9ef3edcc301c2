"""Turns as people hear them: row match and backchannels found on generated interviews.

Generated couple and family interviews with the therapist's backchannels spoken over a client's
sentence (``--overlapping``, and ``--partner``: by another client) and subtitles without speaker names are diarized with the
offline default pipeline (cached under ``--cache``: the slow part) and segmented. Printed per
interview and in total:

* rows matching the script (speaker + text, in order; ``synthetic.interviews.row_match``),
* backchannels found in the right row's ``background_dialogue`` (``backchannels_found``), by
  the therapist (in a pause or over the client's speech) and by a client (over another's),

for four namings: ``hint`` (the manifest's speaking order, given in speaking order),
``voices`` (the default: neutral voice labels, then each voice named once from the voice
table by a simulated annotator: ``name_voices_from_truth``), ``voices-misordered`` (the
same with the participants listed in another order than they speak; the default ignores the
order, so the figures equal ``voices``) and ``voices-round`` (the same names given in the
transcript round's voice block, through the round's own code: task data, pre-annotation, the
pull's parsing and gold's naming of backchannels, ``pipeline.annotation.voice_naming``; the
annotator touches no row; problems the pull would report are printed).

    .venv/bin/python benchmarks/bench_turns.py [--seeds 0 1 2 3] [--scenarios couple family]
        [--overlapping 3] [--partner 0] [--cache DIR]

The last figures and what they mean: benchmarks/README.md. The diarization is cached under
``--cache``, keyed on the interview only, not on the code: use a fresh ``--cache`` after changing
the diarization.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument("--scenarios", nargs="+", default=["couple", "family"])
    ap.add_argument("--overlapping", type=int, default=3, help="therapist backchannels over a sentence, per interview")
    ap.add_argument("--partner", type=int, default=0, help="client backchannels over another's sentence, per interview")
    ap.add_argument("--cache", default="build/bench_turns")
    args = ap.parse_args()

    from pipeline.config import Settings
    from pipeline.media import diarize, rttm, transcribe, turns
    from pipeline.media.audio import extract_wav
    from pipeline.media.models import OFFLINE_DIARIZATION
    from pipeline.synthetic import interviews as synth

    cache = Path(args.cache)
    pipeline = None
    totals: dict[str, list[float]] = {}
    for scenario in args.scenarios:
        for seed in args.seeds:
            name = f"{scenario}{seed}"
            out = cache / f"{name}-o{args.overlapping}p{args.partner}"
            if not (out / f"{name}.rows.json").exists():
                synth.make_interview(out, name, scenario, seed=seed, make_video=False,
                                     overlapping_backchannels=args.overlapping, partner_backchannels=args.partner)
            hyp_path = out / f"{name}.hyp.rttm"
            if not hyp_path.exists():
                wav16 = extract_wav(out / f"{name}.wav", out / f"{name}.16k.wav")
                pipeline = pipeline or diarize.load_pipeline(Settings.from_env().models_dir / OFFLINE_DIARIZATION)
                truth = json.loads((out / f"{name}.rows.json").read_text())
                hyp = diarize.diarize_audio(wav16, num_speakers=1 + len(truth["participants"]), pipeline=pipeline)
                rttm.write_rttm(hyp, hyp_path)
            truth = json.loads((out / f"{name}.rows.json").read_text())
            hyp = rttm.read_rttm(hyp_path)
            transcript = transcribe.parse_subtitles(out / f"{name}.srt", truth["duration_s"])
            people = truth["participants"]
            figures = {}
            runs = {"hint": (people, True), "voices": (people, False),
                    "voices-misordered": (list(reversed(people)), False), "voices-round": (people, False)}
            round_problems = 0
            for how, (listed, hint) in runs.items():
                if not hasattr(turns, "segment_with_voices"):  # the segmenter before voice labels
                    rows = turns.segment(name, transcript, hyp, scenario, listed).to_pylist()
                else:
                    order = turns.default_speaking_order(listed) if hint else None
                    table, voices = turns.segment_with_voices(name, transcript, hyp, scenario, listed, order)
                    names = synth.name_voices_from_truth(voices.to_pylist(), out / f"{name}.rttm")
                    if how == "voices-round":
                        rows, problems = _through_round(name, scenario, listed, table.to_pylist(),
                                                        voices.to_pylist(), names)
                        round_problems += len(problems)
                        for p in problems[:3]:
                            print(f"  {name} problem: row {p['row_index']} {p['field']}: {p['problem']}")
                    else:
                        if not hint:
                            table = turns.apply_voice_names(table, names)
                        rows = table.to_pylist()
                match = synth.row_match(rows, truth["rows"])
                found, total = synth.backchannels_found(rows, truth["rows"])
                by_t = synth.backchannels_found(rows, _only(truth["rows"], lambda who: who == "Therapist"))
                by_c = synth.backchannels_found(rows, _only(truth["rows"], lambda who: who != "Therapist"))
                figures[how] = (match, found, total)
                totals.setdefault(how, []).append((match * len(truth["rows"]), len(truth["rows"]), found, total,
                                                   *by_t, *by_c))
            print(f"{name:9s} DER {rttm.der(rttm.read_rttm(out / f'{name}.rttm'), hyp):.3f}  " + "  ".join(
                f"{how}: rows {m:.0%} backchannels {f}/{t}" for how, (m, f, t) in figures.items())
                + f"  (round problems: {round_problems})", flush=True)
    for how, rs in totals.items():
        matched, n, found, total, ft, tt, fc, tc = (sum(x[i] for x in rs) for i in range(8))
        worst = min(x[0] / x[1] for x in rs)
        print(f"{how:18s} rows matching {matched / n:.1%} (worst interview {worst:.0%}), "
              f"backchannels found {found}/{total} = {found / max(total, 1):.1%} "
              f"(therapist {ft}/{tt}, client {fc}/{tc})")


def _through_round(name: str, scenario: str, participants: list[str], drafts: list[dict], voices: list[dict],
                   names: dict[str, str]) -> tuple[list[dict], list[dict]]:
    """The drafts through the transcript round's own code (no Label Studio): the task data with the
    voice block, its pre-annotation, an annotator who names each voice once (``names``) and
    touches no row, the pull's parsing, and gold's naming of the backchannels."""
    from pipeline.annotation import ls_config, pull, push, voice_naming
    from pipeline.annotation.rounds import load_round

    rnd = load_round("transcript")
    sample = {"sample_id": f"bench/{name}", "scenario": scenario, "participants": participants, "rows": drafts,
              "voices": voices}
    data = ls_config.build_task_data(rnd, sample)
    values = push.input_values(rnd, sample)
    result = [r for r in voice_naming.prefill(rnd, data, values, ls_config.values_to_results(rnd, data, values))
              if not r["from_name"].startswith("voice_")]
    result += [{"from_name": f"voice_{i}_is", "to_name": f"voice_{i}_label", "type": "choices",
                "value": {"choices": [names[v["voice"]]]}} for i, v in enumerate(data["voices"]) if v["voice"] in names]
    labels, problems = pull.parse_annotation(rnd, data, {"result": result}, "bench")
    got = {(line["row_index"], line["field"]): json.loads(line["value"]) for line in labels}
    rows = [{**r, **{f: got[(r["row_index"], f)] for f in ("primary_speaker", "target") if (r["row_index"], f) in got}}
            for r in drafts]
    return voice_naming.name_background(drafts, rows), problems


def _only(rows: list[dict], keep) -> list[dict]:
    """The script's rows with only the backchannels whose speaker ``keep`` accepts."""
    return [{**r, "background_dialogue": [b for b in r["background_dialogue"] if keep(b["speaker"])]} for r in rows]


if __name__ == "__main__":
    main()
