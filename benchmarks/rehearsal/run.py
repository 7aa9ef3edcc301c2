"""The rehearsal from start to end: a data root and a database of its own, the stack, the batch
generated, the machine half through ``ingest-batch``, the human half, the checks and the report
(``rehearse``); whatever happens, everything it started is stopped and its database dropped
(``run``, what ``benchmarks/bench_rehearsal.py`` runs)."""
from __future__ import annotations

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

from . import REPO, batch_params, say
from .checks import (batch_copy, check, compare_releases, human_checks, machine_half_files, machine_record,
                     which_half)
from .database import create_database, drop_database
from .faults import Faults, fault_check, recover_batch
from .report import print_report
from .sampler import Sampler, Steps, cpu_by_group, kill_leftovers, process_table
from .simulation import ADJUDICATOR, human_half, person_email
from .stack import FIRST_WORKER_SLOTS, free_port, measure, start_more_workers

BATCH_NAME = "rehearsal"


def _terminate(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _flush_redis(db: int) -> None:
    import redis

    client = redis.Redis(host="127.0.0.1", port=6379, db=db, socket_connect_timeout=5)
    try:
        client.flushdb()
    finally:
        client.close()


def run(args) -> int:
    """The rehearsal ``args`` asks for (bench_rehearsal.parse_args); the exit status."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started with SIGINT ignored (`&`)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _terminate)  # the finally below stops the stack and drops the database
    tmp = Path(tempfile.mkdtemp(prefix="bench-rehearsal-"))
    root = tmp / "data"
    root.mkdir(mode=0o700)
    report: dict = {"scale": args.scale, "seed": args.seed, "max_rows": args.max_rows, "workers": args.workers,
                    "faults": args.faults,
                    "chunk_size": args.chunk_size, "max_in_flight": args.max_in_flight, "cores": os.cpu_count(),
                    "load_start": os.getloadavg()}
    sampler = Sampler(args.sample_s)
    db_name, redis_db, code = None, None, 1
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
        report["api_processes"] = args.api_processes
        if args.api_processes > 1:  # `rescue stack up --api-processes`: PostgreSQL and a Redis of its own
            if not (url or "").startswith("postgresql"):
                raise RuntimeError(f"--api-processes {args.api_processes} needs the server's database in PostgreSQL; "
                                   f"it is {report['database']}")
            redis_db = args.redis_db
            env.update(RESCUE_PREFECT_API_PROCESSES=str(args.api_processes),
                       PREFECT_REDIS_MESSAGING_URL=f"redis://127.0.0.1:6379/{redis_db}")
            _flush_redis(redis_db)
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
        if redis_db is not None:
            _flush_redis(redis_db)
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
    from pipeline.labelstudio.desks import Desks
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
    desks = Desks(DataRoot(root))

    def desks_up():
        t0 = time.monotonic()
        for email, role in people:  # registered first: their ports; then started side by side
            desks.register(email, role, simulated=True)
        desks.up(log=lambda *_: None)
        for email, role in people:
            desks.add(email, role, secrets.token_urlsafe(18), simulated=True)
        return time.monotonic() - t0

    say(f"rehearsal: scale {args.scale:g}, seed {args.seed}" + (f", rows cut to {args.max_rows}" if args.max_rows else "")
        + f"; {args.workers} worker(s); {args.api_processes} API process(es); {os.cpu_count()} cores, "
        + "load average "
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
        t0, cpu0 = time.monotonic(), cpu_by_group(sampler)
        run_id = start_deployment("ingest-batch/default", batch_params(args, batch, root, annotators))
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
        cpu1 = cpu_by_group(sampler)
        report["machine_cpu_s"] = {k: round(cpu1[k] - cpu0.get(k, 0.0), 1) for k in cpu1}
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
