"""The page figures (the bench's default run): the desks' figures, then per size and round the
interview pushed to the annotator's desk and its pages opened in fresh browsers through the
front (or the desk itself, ``--direct``): first form cold, warm and after a typed login, key
echo, the browser's CPU, the page's size and the desk's memory; one line per round and size."""
from __future__ import annotations

import json
import os
import secrets
import signal
import statistics
import sys
import tempfile
from pathlib import Path

from pipeline.annotation.rounds import load_round

from .stack import FrontProcess, bench_desks, desk_figures, desk_rss_mb, load_avg, make_media, push_sample, stop
from .oracle import answers, family_sample
from .work import work_for_sample
from .browser import first_form, key_echo, launch, login, new_context, page_stats


def _median(values: list) -> float:
    finite = [v for v in values if v == v]  # a timed-out run's NaN figures do not count
    return statistics.median(finite) if finite else float("nan")


def measure(fresh_context, base: str, email: str, password: str, pid: int, task: dict, following: dict, args,
            name: str, n_rows: int, screenshots: Path | None = None) -> dict:
    """One of each page figure (``benchmarks/bench_annotator_ui.py``'s doc): cold and warm in one
    fresh browser, then cold after a typed login in another. A page past ``--page-timeout`` gives
    ``inf`` (and NaN for the rest)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    # cold: a fresh browser (empty cache) that has just logged in; warm: the next task in the
    # same browser (Label Studio's code in the browser's cache)
    context = fresh_context()
    figures = {"first_form_s": float("inf"), "warm_s": float("inf"), "key_echo_ms": float("nan"),
               "cold_cpu_s": float("nan"), "warm_cpu_s": float("nan"),
               "cold_typed_s": float("nan"), "typed_wait_s": float("nan"),
               "height": float("nan"), "nodes": float("nan"), "heap": float("nan")}
    try:
        login(context, base, email, password)
        page = context.new_page()
        figures["first_form_s"], figures["cold_cpu_s"] = first_form(page, f"{base}/projects/{pid}/data?task={task['id']}")
        page.close()
        page = context.new_page()
        figures["warm_s"], figures["warm_cpu_s"] = first_form(page, f"{base}/projects/{pid}/data?task={following['id']}")
        try:
            figures["key_echo_ms"] = key_echo(page)
        except PlaywrightTimeout:  # the page's figures stand; only this echo is missing
            print(f"{name.upper()} {n_rows}: no text box took the focus for the key echo within "
                  f"{args.page_timeout:.0f} s (this run's echo left out)", flush=True)
        figures.update(page_stats(page))
        if screenshots:
            screenshots.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(screenshots / f"{name}_{n_rows}.png"))
    except PlaywrightTimeout:
        print(f"{name.upper()} {n_rows}: no usable form within {args.page_timeout:.0f} s", flush=True)
    finally:
        context.close()
    if not args.direct:  # the same cold page after a login page left open (typing)
        context = fresh_context()
        try:
            figures["typed_wait_s"] = login(context, base, email, password, typing=True)
            figures["cold_typed_s"], _ = first_form(context.new_page(), f"{base}/projects/{pid}/data?task={task['id']}")
        except PlaywrightTimeout:
            print(f"{name.upper()} {n_rows}: no usable form within {args.page_timeout:.0f} s after a typed login",
                  flush=True)
        finally:
            context.close()
    return figures


def pages_main(args) -> None:
    """The page figures (``benchmarks/bench_annotator_ui.py``'s doc): ``ROUND ROWS ...`` lines, the
    ``DESKS`` lines, and with ``--json`` the figures in a file."""
    from playwright.sync_api import sync_playwright

    # stopped (e.g. by `timeout`): still stop the desks and the front it started
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    email = "bench-annotator@rescue.test"
    others = [f"bench-annotator-{i}@rescue.test" for i in range(2, max(args.desks, 1) + 1)]
    passwords = {e: secrets.token_urlsafe(12) for e in [email, *others]}
    password = passwords[email]
    out = []
    summary: dict = {}
    print(f"start {load_avg()} via={'desk' if args.direct else 'front'}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-ui-") as tmp:
        root = Path(tmp) / "data"
        desks = bench_desks(root)
        front = None
        try:
            if args.desks > 0:
                summary["desks"] = desk_figures(desks, [email, *others], passwords)
                desks.down(others)  # the pages are measured with the annotator's desk alone
            else:
                desks.add(email, "annotator", password, timeout=600)
            client = desks.client(email)
            if not args.direct:
                front = FrontProcess(desks.url(email))
                print(f"front release={front.report['release']} version_ok={front.report['version_ok']} "
                      f"patches={','.join(front.report['applied']) or '-'}"
                      + "".join(f" not_applied=[{x}]" for x in front.report["not_applied"]), flush=True)
            base = desks.url(email) if args.direct else front.url
            summary["rss_start_mb"] = desk_rss_mb(desks, email)
            with sync_playwright() as pw:
                browser = launch(pw)

                def fresh_context():  # a browser profile of its own: empty cache, no service worker
                    return new_context(browser, args.page_timeout)

                primed = args.direct
                for n_rows in args.rows:
                    sample = family_sample(n_rows)
                    audio = None if args.no_media else make_media(sample, root / "media")
                    for name in args.rounds:
                        rnd = load_round(name)
                        pid = push_sample(desks, name, sample, email, audio, args.window)
                        tasks = sorted(client.find_tasks(pid, "sample_id", sample["sample_id"]),
                                       key=lambda t: (t["data"].get("window") or {}).get("index", 0))
                        task = tasks[len(tasks) // 2]  # a window from the middle when windowed
                        following = tasks[len(tasks) // 2 + 1] if len(tasks) > 1 else task
                        work = work_for_sample(rnd, sample, answers(rnd, sample), not args.direct, args.window)
                        if not primed:  # the front has served a task page (the bench's doc)
                            context = fresh_context()
                            login(context, base, email, password)
                            first_form(context.new_page(), f"{base}/projects/{pid}/data?task={tasks[0]['id']}")
                            context.close()
                            primed = True
                        runs = [measure(fresh_context, base, email, password, pid, task, following, args, name, n_rows,
                                        screenshots=args.screenshots if i == 0 else None)
                                for i in range(args.repeat)]
                        figures = {k: _median([r[k] for r in runs]) for k in runs[0]}
                        figures["first_form_runs"] = "/".join(f"{r['first_form_s']:.1f}" for r in runs)
                        rss = desk_rss_mb(desks, email)  # the desk once this round's pages were opened
                        line = {"round": name, "rows": n_rows, **figures, **work, "tasks": len(tasks),
                                "via": "desk" if args.direct else "front", "desk_rss_mb": rss,
                                "load": os.getloadavg()}
                        out.append(line)
                        print(f"{name.upper()} {n_rows} first_form_s={line['first_form_s']:.1f} "
                              f"key_echo_ms={line['key_echo_ms']:.0f} clicks_per_turn={work['clicks']:.2f} "
                              f"keys_per_turn={work['keys']:.2f} cold_s={line['first_form_s']:.1f} "
                              f"warm_s={line['warm_s']:.1f} cold_typed_s={line['cold_typed_s']:.1f} "
                              f"typed_wait_s={line['typed_wait_s']:.1f} cold_cpu_s={line['cold_cpu_s']:.1f} "
                              f"warm_cpu_s={line['warm_cpu_s']:.1f} text_fields_per_turn={work['texts']:.2f} "
                              f"tasks={len(tasks)} page_px={line['height']:.0f} dom_nodes={line['nodes']:.0f} "
                              f"first_form_runs={line['first_form_runs']} "
                              f"heap_mb={line['heap'] / 2**20:.0f} desk_rss_mb={rss:.0f} {load_avg()}", flush=True)
                browser.close()
            after = {n: max(x["desk_rss_mb"] for x in out if x["rows"] == n) for n in args.rows}
            summary["rss_after_mb"] = after
            print(f"DESKS rss annotator_desk_start_mb={summary['rss_start_mb']:.0f} "
                  + " ".join(f"after_{n}_rows_mb={v:.0f}" for n, v in after.items()) + f" {load_avg()}", flush=True)
        finally:
            stop(front, desks)
    if args.json:
        # one entry per round line, as before; the desks' figures (DESKS lines) with each
        args.json.write_text(json.dumps([{**line, "desk_summary": summary} for line in out], indent=2))
