"""The RESCUE rehearsal: a RESCUE-shaped batch through every deployment, as a maintainer rebuilds RESCUE.

    .venv/bin/python benchmarks/bench_rehearsal.py --scale S [--workers N] [--database-url URL]
                     [--seed N] [--max-rows R] [--chunk-size C] [--json PATH] [--keep]

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
answers), and so does every adjudicated value; each field's Krippendorff alpha has the alpha
its error rates imply (truth.json's ``expected_agreement``) inside its bootstrap 95% interval
(fields without a closed form, or with fewer than 50 pairable units, are listed, not judged). ``nothing_lost`` is yes when every
interview is accounted for, in the drafts and in the release; the exit status is 1 when any
check fails.

The last line: ``rehearsal scale=S interviews=N minutes=M wall_s=W per_interview_s=P
nothing_lost=yes|no`` (wall_s: from `deployment run ingest-batch` to the release written;
per_interview_s = wall_s / interviews); the line before it splits wall_s into the two halves.
Stops everything it started (also on Ctrl+C or an error) and drops its database.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.rehearsal import say  # noqa: E402
from benchmarks.rehearsal.checks import batch_copy, check, compare_releases, human_checks, machine_half_files, machine_record, which_half  # noqa: E402
from benchmarks.rehearsal.database import create_database, drop_database  # noqa: E402
from benchmarks.rehearsal.faults import fault_check, Faults, recover_batch  # noqa: E402
from benchmarks.rehearsal.report import print_report  # noqa: E402
from benchmarks.rehearsal.sampler import kill_leftovers, process_table, Sampler, Steps  # noqa: E402
from benchmarks.rehearsal.simulation import ADJUDICATOR, human_half, person_email  # noqa: E402
from benchmarks.rehearsal.stack import FIRST_WORKER_SLOTS, free_port, measure, start_more_workers  # noqa: E402

BATCH_NAME = "rehearsal"


# --- the bench ---------------------------------------------------------------------------------

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, required=True, help="RESCUE at this scale (1 = 191 interviews, 1,064.8 min)")
    ap.add_argument("--workers", type=int, default=2, help="local workers on rescue-cpu (default 2: two interviews at a time)")
    ap.add_argument("--database-url", default=None,
                    help="the Prefect server's database (default: a fresh database of PostgreSQL at 127.0.0.1:5432, "
                         "dropped at the end; SQLite when that is unreachable)")
    ap.add_argument("--seed", type=int, default=0, help="the generator's seed")
    ap.add_argument("--max-rows", type=int, default=None, help="cut every interview to this many rows, each voice speaking (smoke runs; `rescue synth batch --max-rows`)")
    ap.add_argument("--chunk-size", type=int, default=1, help="interviews per ingest-interview run (the flow's chunk_size)")
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
    return args


def _terminate(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started with SIGINT ignored (`&`)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _terminate)  # the finally below stops the stack and drops the database
    tmp = Path(tempfile.mkdtemp(prefix="bench-rehearsal-"))
    root = tmp / "data"
    root.mkdir(mode=0o700)
    report: dict = {"scale": args.scale, "seed": args.seed, "max_rows": args.max_rows, "workers": args.workers,
                    "faults": args.faults,
                    "chunk_size": args.chunk_size, "cores": os.cpu_count(), "load_start": os.getloadavg()}
    sampler = Sampler(args.sample_s)
    db_name, code = None, 1
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        if args.database_url:
            url, db_said = args.database_url, "as given by --database-url (kept)"
        else:
            url, db_name, db_said = create_database()
        say(f"rehearsal: data root {root}; Prefect server database: {db_said}")
        report["database"] = "postgresql" if url and url.startswith("postgresql") else "sqlite"
        env = {"RESCUE_DATA_ROOT": str(root), "RESCUE_PREFECT_PORT": str(free_port()),
               "RESCUE_DESK_BASE_PORT": str(free_port()), "RESCUE_SWEEP_EVERY_S": "5",
               "OMP_NUM_THREADS": "1"}  # one torch thread per flow run: N workers, N cores
        if url:
            env["PREFECT_API_DATABASE_CONNECTION_URL"] = url
        for k in ("PREFECT_HOME", "PREFECT_API_URL", "PREFECT_API_AUTH_STRING", "PREFECT_RESULTS_LOCAL_STORAGE_PATH",
                  "PREFECT_API_DATABASE_CONNECTION_URL"):
            os.environ.pop(k, None)  # this stack's own, never the caller's
        os.environ.update(env)
        sampler.start()
        code = rehearse(args, root, env, report, sampler)
    except KeyboardInterrupt as exc:
        say(f"rehearsal: interrupted ({str(exc) or 'Ctrl+C'}); stopping what it started")
        code = 130
    except Exception:  # noqa: BLE001 - the traceback, then the same clean-up
        traceback.print_exc()
        say("rehearsal: failed; stopping what it started")
        code = 1
    finally:
        from ops import stack as st

        with contextlib.suppress(BaseException):
            st.down(root, label_studio=True, log=lambda *_: None)
        sampler.stop()
        if left := kill_leftovers(sampler):
            say(f"rehearsal: stopped leftover processes it had started: {', '.join(left)}")
        if db_name:
            drop_database(db_name)
        if args.keep:
            say(f"rehearsal: data root kept: {root}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_all = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    if "final" in report:
        say(f"CPU of everything it started (rusage of its reaped children): {cpu_all:.0f} s; "
            f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        report["cpu_all_s"] = round(cpu_all, 1)
        if args.json:
            args.json.write_text(json.dumps(report, indent=1, default=str) + "\n")
        say(report["note"])
        say(report["final"])
    return code


def rehearse(args, root: Path, env: dict, report: dict, sampler: Sampler) -> int:
    import secrets
    from concurrent.futures import ThreadPoolExecutor

    from prefect.settings import (PREFECT_API_AUTH_STRING, PREFECT_API_URL, PREFECT_RESULTS_LOCAL_STORAGE_PATH,
                                  temporary_settings)

    from ops import stack as st
    from ops.demo import start_deployment, wait_flow_run
    from pipeline.annotation.desks import Desks
    from pipeline.paths import DataRoot
    from pipeline.synthetic.batch import ANNOTATORS

    data = DataRoot(root)
    batch = data.batches_dir() / BATCH_NAME
    gen_cmd = [str(Path(sys.executable).with_name("rescue")), "synth", "batch", "--scale", f"{args.scale:g}",
               "--seed", str(args.seed), "--out", BATCH_NAME, "--data-root", str(root)]
    if args.max_rows:
        gen_cmd += ["--max-rows", str(args.max_rows)]

    # the reference run's own input, when it kept it (see batch_copy): copied, not generated again
    given = batch_copy(args.reference) if args.reference and batch_copy(args.reference).is_dir() else None

    def generate():
        t0 = time.monotonic()
        if given is not None:
            shutil.copytree(given, batch)
            return time.monotonic() - t0, 0.0, f"the reference run's batch, copied from {given}"
        proc = subprocess.Popen(gen_cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env={**os.environ, "COLUMNS": "200"})
        out = proc.stdout.read().decode(errors="replace")
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            raise RuntimeError(f"rescue synth batch failed ({proc.returncode}):\n{out}")
        return time.monotonic() - t0, ru.ru_utime + ru.ru_stime, out

    # The generator's three annotators, and an adjudicator: a desk each (`rescue annotators add`),
    # a throw-away password nobody keeps (the simulated people answer through the desk's API).
    annotators = [person_email(name) for name in ANNOTATORS]
    people = [(e, "annotator") for e in annotators] + [(ADJUDICATOR, "adjudicator")]
    desks = Desks(root)

    def desks_up():
        t0 = time.monotonic()
        for email, role in people:  # registered first: their ports; then started side by side
            desks.register(email, role, simulated=True)
        desks.up(log=lambda *_: None)
        for email, role in people:
            desks.add(email, role, secrets.token_urlsafe(18), simulated=True)
        return time.monotonic() - t0

    say(f"rehearsal: scale {args.scale:g}, seed {args.seed}" + (f", rows cut to {args.max_rows}" if args.max_rows else "")
        + f"; {args.workers} worker(s); {os.cpu_count()} cores, load average "
        + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    with ThreadPoolExecutor(2) as pool:  # the batch is generated and the desks start while the stack starts
        made, desked = pool.submit(generate), pool.submit(desks_up)
        t0 = time.monotonic()
        env.update(st.up(root, label_studio=False, worker_limit=FIRST_WORKER_SLOTS, workers=1, log=lambda *_: None))
        t_stack = time.monotonic() - t0
        gen_wall, gen_cpu, gen_out = made.result()
        t_desks = desked.result()
    say(f"stack up (the first worker) in {t_stack:.1f} s; {len(people)} desks up in {t_desks:.1f} s; "
        f"batch {'generated' if given is None else 'copied'} in {gen_wall:.1f} s wall, "
        f"{gen_cpu:.1f} s CPU:")
    say("  " + "\n  ".join(line for line in gen_out.strip().splitlines() if line.strip()))
    truth = json.loads((batch / "truth.json").read_text())
    asked = {"scale": args.scale, "seed": args.seed, "max_rows": args.max_rows}
    if given is not None and {k: truth.get(k) for k in asked} != asked:
        raise RuntimeError(f"{given}: made with {({k: truth.get(k) for k in asked})}, not this run's {asked}")
    if sorted(person_email(a["name"]) for a in truth["annotators"]) != sorted(annotators):
        raise RuntimeError(f"{batch / 'truth.json'}: its annotators {[a['name'] for a in truth['annotators']]} are "
                           f"not the desks' {annotators}")
    report.update(stack_up_s=round(t_stack, 1), desks_up_s=round(t_desks, 1), truth_totals=truth["totals"],
                  generate={"wall_s": round(gen_wall, 1), "cpu_s": round(gen_cpu, 1)})

    settings = temporary_settings({PREFECT_API_URL: env["PREFECT_API_URL"], PREFECT_API_AUTH_STRING: env["PREFECT_API_AUTH_STRING"],
                                   PREFECT_RESULTS_LOCAL_STORAGE_PATH: env["PREFECT_RESULTS_LOCAL_STORAGE_PATH"]})
    result, error, state, human, run_kinds = None, None, "?", None, {}
    steps = Steps(sampler)
    faults = Faults(root, desks, annotators, sampler, args.workers) if args.faults else None
    with settings:
        t0 = time.monotonic()
        run_id = start_deployment("ingest-batch/default", {
            "batch_dir": str(batch), "data_root": str(root), "backend": "subtitles", "push": True,
            "annotators": annotators, "chunk_size": args.chunk_size})
        run_kinds[str(run_id)] = "ingest-batch"
        say(f"ingest-batch/default: flow run {run_id} submitted (backend subtitles; the transcript round "
            f"pushed to {len(annotators)} annotators' desks) ...")
        say(f"  the other {args.workers - 1} worker(s) started in {start_more_workers(root, run_id, args.workers):.1f} s, "
            "once the batch ran on the first")
        killer = faults.kill_worker_mid_batch(str(run_id)) if faults else None
        try:
            run = wait_flow_run(run_id, timeout_s=args.timeout_s)
            state, result = run.state.name, run.state.result()
        except Exception as exc:  # noqa: BLE001 - reported, and the checks say what it left
            error = f"{type(exc).__name__}: {exc}"
        finally:
            if killer:
                faults.halt.set()
                killer.join(timeout=5)
        batch_wall = time.monotonic() - t0
        say(f"ingest-batch: {'ended: ' + error if error else state} after {batch_wall:.1f} s "
            f"(load average {' '.join(f'{x:.2f}' for x in os.getloadavg())})")
        time.sleep(2 * args.sample_s)  # the last samples of the last flow-run processes
        figures = measure(run_id, result, sampler, truth)
        if faults and not error:
            result, error = recover_batch(faults, result, steps, run_kinds, args, batch, root, annotators)
        machine = machine_half_files(data, batch)  # before the rounds: which half a release difference came from
        if not error:
            try:
                human = human_half(root, desks, truth, annotators, steps, run_kinds, args.timeout_s, faults)
            except Exception as exc:  # noqa: BLE001 - reported; the checks say what is missing
                traceback.print_exc()
                error = f"human half: {type(exc).__name__}: {exc}"
        wall = time.monotonic() - t0
    report.update(batch_wall_s=round(batch_wall, 1), batch_error=error, wall_s=round(wall, 1), **figures,
                  steps=steps.rows, **process_table(sampler, run_kinds))
    checks = check(truth, result, data)
    checks.update(human_checks(truth, result, data, human))
    if faults:
        checks["faults"] = fault_check(faults)
    if args.reference:
        differ = compare_releases(Path(human["release"]), args.reference) if human else ["no release"]
        if differ:
            differ += which_half(machine, machine_record(args.reference))
        checks["release_identical"] = {"ok": not differ, "problems": differ, "reference": str(args.reference)}
    if args.save_release and human:
        shutil.copytree(human["release"], args.save_release)
        machine_record(args.save_release).write_text(json.dumps(machine, indent=1, sort_keys=True))
        shutil.copytree(batch, batch_copy(args.save_release))
        say(f"release copied to {args.save_release} (the machine half's files: {machine_record(args.save_release)}; "
            f"the batch: {batch_copy(args.save_release)})")
    report["fault_events"] = faults.events if faults else None
    report["checks"] = checks
    report["quarantined"] = (result or {}).get("quarantined", {})
    report["human"] = human
    print_report(report, truth)

    n = truth["totals"]["interviews"]
    ok = all(c["ok"] for c in checks.values())
    lost = not all(checks[k]["ok"] for k in ("accounted", "bad_files", "good_not_quarantined", "release_accounted",
                                             "release_rows", "faults", "release_identical") if k in checks)
    report["nothing_lost"] = not lost
    report["note"] = (f"(wall_s: from `deployment run ingest-batch` to the release written: the machine half "
                      f"{batch_wall:.1f} s, the human half {wall - batch_wall:.1f} s)")
    report["final"] = (f"rehearsal scale={args.scale:g} interviews={n} minutes={truth['totals']['minutes']:g} "
                       f"wall_s={wall:.1f} per_interview_s={wall / max(n, 1):.1f} "
                       f"nothing_lost={'no' if lost else 'yes'}")
    return 0 if ok and not error else 1


if __name__ == "__main__":
    sys.exit(main())
