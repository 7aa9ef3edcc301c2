"""The RESCUE rehearsal: a RESCUE-shaped batch through every deployment, as a maintainer rebuilds RESCUE.

    .venv/bin/python benchmarks/bench_rehearsal.py --scale S [--workers N] [--database-url URL] [--api-processes P]
                     [--seed N] [--max-rows R] [--chunk-size C] [--max-in-flight M] [--json PATH] [--keep]

What an operator does, on a stack of its own under a temporary data root:

1. ``rescue synth batch --scale S --seed N --out rehearsal`` (the generator:
   videos, subtitles, manifest.csv, truth.json with the simulated annotators' per-field error
   rates; a few planted bad files; with ``--reference DIR``, the batch saved beside that release,
   DIR.batch, copied instead: both runs start from the same bytes), while
2. ``ops.stack.up`` starts a Prefect server - on a fresh database of the machine's PostgreSQL
   (127.0.0.1:5432, user root; created here and dropped at the end), or on ``--database-url``
   (used as given, never dropped), or on SQLite when PostgreSQL is unreachable (said so) - and
   N workers on ``rescue-cpu`` (the first with two slots: the batch run waits in one; the others
   one slot each: N interviews at a time) and the sweeper, and four desks (a Label Studio each,
   ``rescue annotators add``): the generator's three simulated annotators and an adjudicator;
3. the machine half: ``ingest-batch/default`` through the deployment (``ops.demo.start_deployment``,
   what ``prefect deployment run`` does) with the subtitles backend: one ``ingest-interview``
   child run per interview (ingest -> transcript + diarize -> segment), then the transcript
   round pushed to the three annotators' desks;
4. the human half, per round (transcript, emotion, viewpoints, relation, strategy), as
   docs/OPERATIONS.md says: the three simulated annotators answer every task through their own
   desk's HTTP API, as the browser posts it, each with the generator's error rates; one
   ``annotation-round/default`` run pulls, measures agreement, sends the disagreements to the
   adjudication desk and pauses; the simulated adjudicator answers there (from the truth); the
   run is resumed, pulls the adjudication, builds gold and pushes the next round. A round below
   its agreement threshold gets a recorded override (the manifest carries it). Then
   ``build-release/default`` writes release 1.0.0.

It prints, for the machine half, per stage (ingest, transcribe, diarize, segment, push) the task
runs' own records (wall seconds: sum and mean per interview, span) and CPU seconds (each
flow-run process's CPU, its ffmpeg children included, sampled from /proc every ``--sample-s``
and credited to the stage whose task ran in that process then; two stages at once share it;
the rest is the flow run's own overhead: process start, imports, Prefect); for the human half,
per step, wall seconds and the CPU seconds of every process it started in that time, by group
(desks, flow runs, Prefect server, the simulated people in this process); peak resident memory
(VmHWM) per kind of process (Prefect server, worker, sweeper, each desk, the flow runs of each
deployment, their ffmpeg, the generator, this bench); counts (interviews, draft rows, diarized
turns, quarantined; per round tasks, annotations, label lines, problems, disagreements, gold
rows). Then the checks against truth.json: every interview has its drafts or is quarantined
with a reason; each planted bad file is quarantined and its reason names the file and the
problem; no good interview is quarantined; each drafted interview's row count equals the
truth's; every interview is in the release or quarantined with its reason; released row
counts equal the truth's; where all three annotators gave one value, gold equals the truth
(unless all three made the same mistake, which the bench recomputes from the simulated
answers), and so does every adjudicated value; each field's Krippendorff alpha is exactly the
alpha of the simulated answers themselves, measured by the same agreement code without Label
Studio (the answers the pull refused, each with its reason, left out): the round trip through
the desks lost or changed none; and each field's alpha has the alpha its error rates imply
(truth.json's ``expected_agreement``) inside its bootstrap 95% interval (fields without a
closed form, or with fewer than 50 pairable units, are listed, not judged; one outside even at
family-wise 95% passes, saying so, where it is the answers' own: their draw is off the theory,
not the round). ``nothing_lost`` is yes when every
interview is accounted for, in the drafts and in the release; the exit status is 1 when any
check fails.

The last line: ``rehearsal scale=S interviews=N minutes=M wall_s=W per_interview_s=P
nothing_lost=yes|no`` (wall_s: from `deployment run ingest-batch` to the release written;
per_interview_s = wall_s / interviews); the line before it splits wall_s into the two halves.
Stops everything it started (also on Ctrl+C or an error) and drops its database.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

# The bench's code is the package beside this script, a module per job (its __init__ lists them):
# `rehearsal` here, where this script's folder is first on sys.path, and `benchmarks.rehearsal`
# from the repository root, as the tests import it.
from rehearsal.checks import batch_copy
from rehearsal.run import run


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, required=True, help="RESCUE at this scale (1 = 191 interviews, 1,064.8 min)")
    ap.add_argument("--workers", type=int, default=2, help="local workers on rescue-cpu (default 2: two interviews at a time)")
    ap.add_argument("--database-url", default=None,
                    help="the Prefect server's database (default: a fresh database of PostgreSQL at 127.0.0.1:5432, "
                         "dropped at the end; SQLite when that is unreachable)")
    ap.add_argument("--api-processes", type=int, default=1,
                    help="processes serving the Prefect API (`rescue stack up --api-processes`); more than 1 needs "
                         "PostgreSQL and Redis (--redis-db)")
    ap.add_argument("--redis-db", type=int, default=10,
                    help="with --api-processes > 1: this database of the Redis at 127.0.0.1:6379 carries the server's "
                         "events (emptied before and after: give one nothing else uses)")
    ap.add_argument("--seed", type=int, default=0, help="the generator's seed")
    ap.add_argument("--max-rows", type=int, default=None, help="cut every interview to this many rows, each voice speaking (smoke runs; `rescue synth batch --max-rows`)")
    ap.add_argument("--chunk-size", type=int, default=None,
                    help="interviews per ingest-interview run (the flow's chunk_size; default: the flow's default)")
    ap.add_argument("--max-in-flight", type=int, default=None,
                    help="child runs queued or running at once (the flow's max_in_flight; default: the flow's)")
    ap.add_argument("--sample-s", type=float, default=0.5, help="how often /proc is sampled")
    ap.add_argument("--timeout-s", type=float, default=4 * 3600, help="give up on the batch run after this long")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures and checks to this file")
    ap.add_argument("--keep", action="store_true", help="keep the temporary data root (the stack is stopped all the same)")
    ap.add_argument("--faults", action="store_true",
                    help="inject four faults (a worker SIGKILLed mid-batch, a desk killed during a pull, the Prefect "
                         "server restarted between rounds, a task submitted twice), recover each as "
                         "docs/OPERATIONS.md says, and compare the release with --reference")
    ap.add_argument("--reference", type=Path, default=None,
                    help="a release of a run without faults on the same scale, seed and rows (--save-release): this "
                         "run's release must hold the same bytes; the batch saved beside it (DIR.batch) is this "
                         "run's batch too (copied, not generated again)")
    ap.add_argument("--save-release", type=Path, default=None,
                    help="copy the release here (a --reference for a faulted run), and the machine half's file hashes "
                         "(DIR.machine.json) and the generated batch (DIR.batch) beside it")
    args = ap.parse_args(argv)
    if args.workers < 1:
        ap.error("--workers must be at least 1")
    if args.api_processes < 1:
        ap.error("--api-processes must be at least 1")
    if args.faults and args.workers < 2:
        ap.error("--faults kills one of the workers mid-batch: give --workers 2 or more")
    if args.faults and args.reference is None:
        ap.error("--faults needs --reference DIR: the release of a run without faults (--save-release DIR), "
                 "which this run's release must equal")
    if args.reference is not None and not (args.reference / "manifest.json").is_file():
        ap.error(f"--reference {args.reference}: no release there (no manifest.json)")
    if args.save_release is not None and (args.save_release.exists() or batch_copy(args.save_release).exists()):
        ap.error(f"--save-release {args.save_release}: it (or {batch_copy(args.save_release).name}) already exists; "
                 "give a new folder")
    if args.chunk_size is None:
        from flows.ingest_batch import CHUNK_SIZE

        args.chunk_size = CHUNK_SIZE
    return args


def main(argv=None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
