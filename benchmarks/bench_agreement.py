"""Agreement + gold at RESCUE scale: 7,079 rows x 5 rounds x 3 annotators.

Target: agreement for every round and field plus the gold build in <= 10 s on 2 cores.
The label table comes from SIMULATED annotators (pipeline.synthetic.annotators) over the synthetic
RESCUE-scale corpus; making it is not timed. Prints the figures.

    .venv/bin/python benchmarks/bench_agreement.py [--scale 1.0] [--annotators 3] [--breakdown]
"""
from __future__ import annotations

import argparse
import os
import time

import pyarrow as pa

from pipeline import schemas
from pipeline.quality import coding, measures
from pipeline.quality import gold
from pipeline.synthetic import corpus as synth_corpus
from pipeline.annotation.rounds import load_round, round_names
from pipeline.synthetic.annotators import SimulatedAnnotator

TARGET_S = 10.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--annotators", type=int, default=3)
    ap.add_argument("--error", type=float, default=0.15)
    ap.add_argument("--breakdown", action="store_true", help="also print what the bootstrap intervals and the "
                    "free-text measures cost (runs the agreement three more times)")
    args = ap.parse_args()

    t0 = time.perf_counter()
    samples = synth_corpus.generate(scale=args.scale, seed=0)
    rounds = [load_round(n) for n in round_names()]
    sims = [SimulatedAnnotator(f"a{i}", {"*": args.error}, seed=i) for i in range(args.annotators)]
    lines = [x for rnd in rounds for a in sims for x in a.label_rows(rnd, samples)]
    labels = pa.Table.from_pylist(lines, schema=schemas.LABELS)
    n_rows = sum(len(s["rows"]) for s in samples)
    print(f"setup (not timed): {len(samples)} samples, {n_rows} rows, {len(rounds)} rounds, "
          f"{args.annotators} simulated annotators -> {labels.num_rows} label lines in {time.perf_counter() - t0:.1f} s")

    cpu0 = time.process_time()
    t = time.perf_counter()
    cleaned = coding.clean_labels(labels)
    t_clean = time.perf_counter() - t
    reports = []
    t = time.perf_counter()
    for rnd in rounds:
        reports.append(measures.round_agreement(cleaned, rnd.name, rnd))
    t_agree = time.perf_counter() - t
    t = time.perf_counter()
    result = gold.build_gold(samples, cleaned, rounds, strict=False)
    t_gold = time.perf_counter() - t
    total = t_clean + t_agree + t_gold
    cpu = time.process_time() - cpu0

    for rep in reports:
        print(f"  {rep.round:<11} " + ", ".join(f"{f.field}={f.alpha:.3f}" if f.alpha is not None else f"{f.field}=n/a"
                                              for f in rep.fields))
    print(f"gold: {result.summary['rows']} rows, {result.summary['values']} values, methods {result.summary['methods']}")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"parse+dedupe {t_clean:.2f} s | agreement (5 rounds, all breakdowns) {t_agree:.2f} s | gold {t_gold:.2f} s")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"CPU time of this process: {cpu:.2f} s (load average during the run: {load:.1f}; wall time grows "
          f"when other work shares the cores)")
    print(f"TOTAL agreement + gold: {total:.2f} s wall on {cores} cores (target <= {TARGET_S:.0f} s: "
          f"{total / TARGET_S:.2f} of the budget) -> {'OK' if total <= TARGET_S else 'OVER'}")
    for rep in reports:
        for tf in rep.text_fields:
            print(f"  free text {rep.round}.{tf.field} ({tf.measure}): {tf.value:.3f} over {tf.n_units} units")
    if args.breakdown:  # what the bootstrap intervals and the free-text measures add (CPU, untimed above)
        def cpu_of() -> float:
            c = time.process_time()
            for rnd in rounds:
                measures.round_agreement(cleaned, rnd.name, rnd)
            return time.process_time() - c

        full = cpu_of()
        boot, text = measures.bootstrap_alpha, measures.text_agreement
        measures.bootstrap_alpha = lambda *a, **k: None
        no_boot = cpu_of()
        measures.text_agreement = lambda *a, **k: measures.TextAgreement("r", "f", "wer", None, 0, 0)
        bare = cpu_of()
        measures.bootstrap_alpha, measures.text_agreement = boot, text
        print(f"agreement CPU {full:.2f} s, of which bootstrap intervals {full - no_boot:.2f} s and free-text "
              f"measures {no_boot - bare:.2f} s")


if __name__ == "__main__":
    main()
