"""The rehearsal's figures and checks, printed (the same report goes to --json)."""
from __future__ import annotations

from . import say

def print_report(report: dict, truth: dict) -> None:
    minutes = truth["totals"]["minutes"]
    say("\nper stage (task runs' own records; CPU sampled from /proc, ffmpeg included):")
    say(f"  {'stage':11s} {'runs':>5s} {'wall s':>8s} {'per interview':>13s} {'max':>7s} {'span s':>8s} "
        f"{'CPU s':>8s} {'CPU s/audio min':>15s}")
    for name, s in report["stages"].items():
        per = s["wall_sum_s"] / s["runs"] if s["runs"] else 0.0
        say(f"  {name:11s} {s['runs']:5d} {s['wall_sum_s']:8.1f} {per:13.2f} {s['wall_max_s']:7.1f} "
            f"{s['span_s']:8.1f} {s['cpu_s']:8.1f} {s['cpu_s'] / max(minutes, 1e-9):15.2f}"
            + (f"  ({s['cached']} cached)" if s["cached"] else "")
            + (f"  ({s['not_run']} not run: quarantined by an earlier stage)" if s.get("not_run") else ""))
    c = report["child_runs"]
    say(f"  child runs: {c['count']}; per run, mean: {c.get('mean_pickup_to_running_s')} s from a worker's pick-up "
        f"(Pending) to Running, of which {c['mean_process_start_s']} s from process start (imports, pull step); "
        f"{c['mean_running_s']} s Running, {c['mean_outside_stages_s']} s of the process "
        f"outside its stages; {c['overhead_cpu_s']} CPU s outside the stages in all")
    n = max(truth["totals"]["interviews"], 1)
    if "machine_cpu_s" in report:
        server = report["machine_cpu_s"].get("prefect server", 0.0)
        total = report["processes"].get("prefect server", {}).get("cpu_s", 0.0)
        say(f"  the Prefect server: {server:.1f} CPU s in the machine half ({server / n:.2f} per interview), "
            f"{total:.1f} CPU s in all ({total / n:.2f} per interview, the rounds and its idle polling included)")
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
              "alpha_seeded": "each field's alpha is the simulated answers' own, measured without Label Studio "
                              "(the answers the pull refused, with their reasons, left out)",
              "alpha": "each field's alpha (50 units or more): its bootstrap 95% interval holds the alpha the error "
                       "rates imply, or the answers are an unlikely draw (their own alpha, exactly)",
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
