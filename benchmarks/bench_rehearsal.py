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
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.rehearsal import say  # noqa: E402
from benchmarks.rehearsal.database import create_database, drop_database  # noqa: E402
from benchmarks.rehearsal.faults import fault_check, Faults, recover_batch  # noqa: E402
from benchmarks.rehearsal.sampler import kill_leftovers, process_table, Sampler, Steps  # noqa: E402
from benchmarks.rehearsal.simulation import ADJUDICATOR, human_half, person_email, simulated_annotators, truth_samples  # noqa: E402
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


def alpha_verdict(measured: dict, expected: float | None, judged: int = 1) -> tuple[bool | None, str]:
    """Whether a field's measured alpha (agreement.json's figures) agrees with the alpha the
    error rates imply: the bootstrap 95% interval holds it. Not judged (None) without a closed
    form, or below the agreement report's own floor of pairable units, where a percentile
    bootstrap is no interval at all (5 units all agreeing resample to [1.0, 1.0]).

    With ``judged`` fields judged together, a correct pipeline would put one of nine outside its
    95% interval more than a third of the time; so an expected alpha just outside is judged
    again at family-wise 95% (Bonferroni: each interval widened to 1 - 0.05/judged, from the 95%
    one by the ratio of the normal quantiles), and passes there, saying so."""
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
    return False, "OUTSIDE"


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


def human_checks(truth: dict, result: dict | None, data, human: dict | None) -> dict:
    """The human half's checks: the release against truth.json, gold against the truth, and each
    field's measured alpha against the alpha the generator's error rates imply."""
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

    # Alpha per field: the measured one's bootstrap interval must hold the expected one.
    alpha_bad, alpha_rows, fields = [], [], []
    for name in human["rounds"]:
        report = json.loads((data.agreement_report_dir(name) / "agreement.json").read_text())
        expected = truth["expected_agreement"].get(name, {})
        fields += [(name, fa, expected) for fa in report["fields"]]
    judged = sum(not why_not_judged(fa, (expected.get(fa["field"]) or {}).get("alpha")) for _, fa, expected in fields)
    for name, fa, expected in fields:
        exp = (expected.get(fa["field"]) or {}).get("alpha")
        lo, hi = fa.get("ci_low"), fa.get("ci_high")
        ok, why = alpha_verdict(fa, exp, judged)
        alpha_rows.append({"round": name, "field": fa["field"], "alpha": fa["alpha"], "ci_low": lo, "ci_high": hi,
                           "expected": exp, "exact": (expected.get(fa["field"]) or {}).get("exact"),
                           "units": fa["n_units"], "ok": ok, "why": why})
        if ok is False:
            alpha_bad.append(f"{name}.{fa['field']}: alpha {fa['alpha']} with interval {lo}-{hi}; "
                             f"the error rates imply {exp}")
    return {
        "release_accounted": {"ok": not accounted, "problems": accounted, "released": len(released)},
        "release_rows": {"ok": not rows_bad and bool(released), "problems": rows_bad,
                         "rows": sum(len(s["rows"]) for s in released.values())},
        "gold_truth": {"ok": not gold_bad and bool(tally), "problems": gold_bad, "tally": dict(tally)},
        "alpha": {"ok": not alpha_bad and bool(alpha_rows), "problems": alpha_bad, "fields": alpha_rows,
                  "checked": sum(r["ok"] is not None for r in alpha_rows)},
    }


def print_report(report: dict, truth: dict) -> None:
    minutes = truth["totals"]["minutes"]
    say("\nper stage (task runs' own records; CPU sampled from /proc, ffmpeg included):")
    say(f"  {'stage':11s} {'runs':>5s} {'wall s':>8s} {'per interview':>13s} {'max':>7s} {'span s':>8s} "
        f"{'CPU s':>8s} {'CPU s/audio min':>15s}")
    for name, s in report["stages"].items():
        per = s["wall_sum_s"] / s["runs"] if s["runs"] else 0.0
        say(f"  {name:11s} {s['runs']:5d} {s['wall_sum_s']:8.1f} {per:13.2f} {s['wall_max_s']:7.1f} "
            f"{s['span_s']:8.1f} {s['cpu_s']:8.1f} {s['cpu_s'] / max(minutes, 1e-9):15.2f}"
            + (f"  ({s['cached']} cached)" if s["cached"] else ""))
    c = report["child_runs"]
    say(f"  child runs: {c['count']}; per run, mean: {c['mean_process_start_s']} s from process start to Running "
        f"(imports, pull step), {c['mean_running_s']} s Running, {c['mean_outside_stages_s']} s of the process "
        f"outside its stages; {c['overhead_cpu_s']} CPU s outside the stages in all")
    if report.get("steps"):
        say("\nthe human half, per step (wall s; CPU s of every process in it, by group):")
        for row in report["steps"]:
            cpu = row.get("cpu_s", {})
            parts = ", ".join(f"{k} {v:.1f}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1]))
            counts = ", ".join(f"{k} {row[k]}" for k in ("tasks", "annotations") if k in row)
            say(f"  {row['step']:72s} {row.get('wall_s', 0):7.1f} s  CPU {sum(cpu.values()):7.1f} s"
                + (f" ({parts})" if parts else "") + (f"; {counts}" if counts else ""))
    human = report.get("human") or {}
    if human.get("rounds"):
        say("\nper round: tasks (all desks), annotations posted (annotators + adjudicator), label lines pulled, "
            "problems, disagreeing rows, gold rows, gate:")
        for name, r in human["rounds"].items():
            say(f"  {name:11s} tasks {r['tasks']:5d}  annotations {r['annotations']:5d} + {r['adjudications']:4d}  "
                f"label lines {r['label_lines']:7d}  problems {r['problems']:4d}  disagreements {r['disagreements']:5d}  "
                f"gold rows {r['gold_rows']}  gate {'pass' if r['passed'] else 'below threshold (override recorded)'}")
        say(f"  release: {human['release']}")
    say("\nper kind of process (peak resident memory: VmHWM of the largest one; CPU s: self, flow runs with "
        "their ffmpeg):")
    for kind, k in sorted(report["processes"].items()):
        cpu = "" if kind.startswith(("ffmpeg", "generator")) else f"{k['cpu_s']:8.1f}"
        say(f"  {kind:38s} {k['processes']:4d} process(es) {k['peak_rss_mb']:8.1f} MB {cpu}")
    say(f"  all at once (sum of resident memory, largest sample): {report['peak_total_rss_mb']:.1f} MB")
    cnt = report["checks"]["counts"]
    say(f"\ncounts: interviews {cnt['interviews']} ({cnt['drafted']} drafted, {cnt['quarantined']} quarantined, "
        f"{cnt['planted']} bad files planted); draft rows {cnt['rows_drafted']} (truth for those: "
        f"{cnt['rows_truth_of_drafted']}; truth for the whole batch {cnt['rows_truth']}); "
        f"diarized turns {cnt['turns']}; minutes {minutes}")
    for sid, reason in sorted(report.get("quarantined", {}).items()):
        say(f"  quarantined {sid}: {reason}")
    say("\nchecks:")
    labels = {"accounted": "every interview has its drafts or is quarantined with its reason",
              "bad_files": "each planted bad file is quarantined, its reason naming the file and the problem",
              "good_not_quarantined": "no interview without a planted fault is quarantined",
              "rows_equal_truth": "each drafted interview's row count equals truth.json",
              "release_accounted": "every interview is in the release, or quarantined with its reason",
              "release_rows": "each released interview's row count equals truth.json",
              "gold_truth": "where all three annotators agree, and where the adjudicator decided, gold equals the truth",
              "alpha": "each field's alpha (50 units or more): its bootstrap 95% interval holds the alpha the error "
                       "rates imply",
              "faults": "each fault injected once and recovered by the documented command",
              "release_identical": "the release holds the same bytes as the reference release (a run without faults)"}
    for key, label in labels.items():
        if key not in report["checks"]:
            continue
        ch = report["checks"][key]
        say(f"  [{'ok' if ch['ok'] else 'FAIL'}] {label}")
        for p in ch["problems"][:20]:
            say(f"         {p}")
    ch = report["checks"]
    for key, ev in (report.get("fault_events") or {}).items():
        say(f"  fault {key}: {ev.get('what', '-')}; recovered by: {ev.get('recovered_by', '-')}"
            + (f"; interviews it hit: {ev['interviews']}, after the rerun: {ev.get('redone')} "
               f"({ev.get('cached')} interviews from the cache)" if key == "worker" and "interviews" in ev else ""))
    if ch["release_accounted"].get("released") is not None:
        say(f"  release: {ch['release_accounted']['released']} interviews, {ch['release_rows'].get('rows')} rows; "
            f"gold cells checked: " + ", ".join(f"{k} {v}" for k, v in sorted(ch["gold_truth"].get("tally", {}).items())))
    if ch["alpha"].get("fields"):
        say("  alpha per field (measured [bootstrap 95%], expected from the error rates; exact: the theory covers "
            "every case):")
        for r in ch["alpha"]["fields"]:
            iv = f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}]" if r["ci_low"] is not None else "[no interval]"
            alpha = f"{r['alpha']:.3f}" if r["alpha"] is not None else "n/a"
            exp = f"{r['expected']:.3f}" if r["expected"] is not None else "none"
            verdict = {True: "ok" if r["why"] == "inside" else f"ok ({r['why']})", False: "OUTSIDE",
                       None: f"- ({r['why']})"}[r["ok"]]
            say(f"    {r['round'] + '.' + r['field']:44s} {alpha:>6s} {iv:16s} expected {exp:6s} "
                f"units {r['units']:5d} {'' if r['exact'] in (None, True) else '(not exact) '}{verdict}")
    if report.get("batch_error"):
        say(f"  [FAIL] the run: {report['batch_error']}")


if __name__ == "__main__":
    sys.exit(main())
