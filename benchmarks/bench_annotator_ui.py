"""What an annotator meets in the browser: page readiness, key echo and the work per turn.

Works as annotators do, through the desks (``pipeline.labelstudio.desks``): under a throw-away
data root it makes one real desk (a Label Studio of its own, from the template database, on
127.0.0.1) per simulated annotator with ``Desks.add`` (the person's login set by the desk's own
signup form, as ``rescue annotators add`` does), and puts the desk's front
(``pipeline.labelstudio.front.FrontServer``: what annotators are given, ``rescue annotate front``) in front of
that annotator's desk, in a process of its own. It pushes a generated family interview of 111
and of 250 rows for every round to the annotator's desk (with a noise WAV as long as the
interview as its audio, placed in the desk's file root by the push; transcript with the
segmenter's draft as pre-annotation, the later rounds as for a new interview: without gold from
earlier rounds, with the rounds' defaults; both interviews go to the annotator's one project per
round, as a batch's samples do, so the 250-row interview's middle window follows the 111-row
one's windows: for transcript, emotion and viewpoints past the data manager's first page of 30
tasks, as a page reloaded or a task link opened late in a batch is), and in headless Debian
Chromium (Playwright) logs in through the front's login form with the person's password and
opens the annotator's task, ``--repeat`` times (default 3: single page loads on a shared 2-core
machine vary by +-0.3 s). Prints one line per round and size, each page figure the median of
the repeats (``first_form_runs``: each run's first form, the first on the project's first
visit, when the data manager saves the annotator's tab; the others later visits, as most of an
annotator's pages are):

    ROUND ROWS first_form_s=X key_echo_ms=Y clicks_per_turn=Z keys_per_turn=W cold_s=X warm_s=V cold_typed_s=T ...

* ``first_form_s`` (= ``cold_s``): in a fresh browser (empty cache) that has just logged in,
  from navigation to a task (a window from the middle of the sample) to its first form being
  on the page, scrolled into view, with its first control visible.
* ``cold_typed_s``: the same as ``first_form_s`` in another fresh browser whose login page was
  left open until the front's service worker had cached Label Studio's build (``typed_wait_s``,
  from the login page's load to the worker being active), as it is while a person types their
  e-mail and password; ``first_form_s`` logs in at once (the worker still installing, or not
  there yet when the page opens). Before the first figure the front has served one task page
  (it learns the build's scripts from the pages it serves, as it has after its person's first
  page since it started).
* ``warm_s``: the same for the next task in the same browser (Label Studio's code cached):
  what an annotator waits from one task or part to the next.
* ``cold_cpu_s`` / ``warm_cpu_s``: the CPU seconds all of Chromium's processes used meanwhile
  (on 2 cores it can exceed the wall time). The page is CPU-bound (Label Studio's app and editor
  build every form in the renderer's main thread): on the shared machine, where other work
  stretches the wall time, compare these between runs at different load.
* ``key_echo_ms``: median over 5 key presses in the first text control of that form (an empty
  one, else a pre-filled one opened with its edit button) of the time from the key press to the
  character being in the control (measured with Playwright round trips, which add a few ms).
* ``clicks_per_turn`` / ``keys_per_turn``: the clicks and key presses (not counting the
  characters of free text) that enter the benchmark's answers into the forms of every task of
  the sample exactly as the pipeline pushes them (its labeling config and pre-filled values),
  averaged over the rows that have controls; ``text_fields_per_turn``: free-text fields typed
  per turn. Counting rules are in :func:`work.work_per_turn` (a choice of a form's first list: its
  number key, and one Enter to come to the form; other buttons and boxes: 1 click each; a
  dropdown: 2 clicks; a text: 1 click + Shift+Enter; a number: 1 click + digits + Tab).
  ``--work-only``: these figures alone, no server, no browser.
* ``desk_rss_mb``: the resident memory of the annotator's desk (the RSS of its Label Studio's
  process group, :func:`stack.desk_rss_mb`) once that round's pages were opened (at 250 rows: after a
  250-row window was opened).
* The desks themselves (``--desks N``, default 4; 0: only the annotator's desk): ``DESKS`` lines
  with the seconds ``Desks.add`` takes for N new people one after the other (each a desk started
  from the template database and a login made: ``rescue annotators add`` run N times), the
  seconds ``Desks.up`` takes to start those N registered desks from cold (stopped, side by side
  as ``rescue annotate desks up`` does), and each desk's resident memory idle (after ``up``).
  The other desks are stopped again before the pages are measured.
* Before figures: ``RESCUE_NO_SW=1`` (no service worker from the front), ``RESCUE_NO_SLIM_COLUMNS=1``
  (Label Studio's default task-list columns) or ``RESCUE_NO_BUNDLE_PATCHES=1`` (Label Studio's
  editor as built) in the environment reaches the front the benchmark starts (a separate run,
  not interleaved: on the shared machine compare only runs under similar load). ``--direct``:
  the desk itself, no front.
* ``--keyboard`` (instead of the page figures): one whole window of every round by keyboard alone
  through the front, at the first ``--rows`` (default 111), in a fresh browser per round: from the
  project list (arrow keys, Enter; "Label All Tasks", Enter) into the label stream (Escape closes
  the round's instructions, which open on the first entry), each form
  filled as the front's keys lead (:func:`driver.keyboard_window`: a proposal kept is accepted with `a`), Enter to the next, Ctrl+Enter to
  submit; the desk is then asked whether the window's annotation was saved. Prints per round
  ``ROUND keyboard_keys_per_row=K clicks_per_row=C tabs_per_row=T submitted=yes|no`` and extras
  (keys: every press but free text's characters, the route included; about 5 minutes). With
  ``--screenshots DIR`` each round's page, filled, before its submit: ``DIR/ROUND.png`` (the
  README's pictures: ``--keyboard --screenshots docs/annotator``).
* ``--keyboard --whole``: a whole interview as one annotator lives it, in ONE browser tab by keys
  alone through the front: every window of every round (in annotation order) of one family
  interview of the first ``--rows``. The login is typed (e-mail, Tab, password, Enter); it
  lands on the person's rounds (the front's landing: the first round focused); each round is
  entered from there (arrow keys to its card, Enter, Enter on "Label All Tasks"; a later round
  opens the list by its address first, counted as one key), its instructions closed with Escape,
  then per window: Enter to the first form, each form filled as the page's keys and the choices'
  printed keys say (:func:`driver.keyboard_form`: a proposal kept is accepted with `a`), Enter to the next, Ctrl+Enter to submit. The bench
  keeps an oracle (the answer meant for each field of each row, :func:`oracle.answers`) and at the end
  reads back what the desk stored (its export). Per round::

      ROUND windows=N keyboard_keys_per_row=K tabs_per_row=T clicks_per_row=C wrong_answers=W unseen_changes=U submitted=yes|no submit_to_next_s_median=S ...

  ``wrong_answers``: stored values that differ from the oracle (a field meant but stored
  otherwise or not at all, or a row field stored that the oracle leaves empty), over the windows
  stored; ``unseen_changes``: choices ticked or unticked while their row's form was off screen
  (outside the viewport or its scrolled box), seen by a page observer (``driver.UNSEEN_WATCH``) from
  a window's first key to its submit; ``submitted``: every window of the round stored, none
  refused (a refused submit ends the round there and its sentence is printed);
  ``submit_to_next_s_median``: from Ctrl+Enter to the next window's first usable form (new task,
  first control visible); ``submit_cpu_s_median``: the browser's CPU seconds (all of Chromium's
  processes) over the same span, steadier than the wall time on a shared machine (every window's
  figures in ``submit_s_all`` / ``submit_cpu_s_all``); ``desk_calls``: the desk's API calls
  during the submits, per method and path their count and median seconds (the save
  ``POST /api/tasks/N/annotations``, the next task ``POST /api/dm/actions``).
  ``BENCH_UI_PROFILE=DIR`` writes a DevTools CPU profile of the page per submit,
  ``DIR/ROUND-wN.cpuprofile``. The last line::

      whole interview: windows=N wrong_answers=W machine_wait_share=P%

  where the share is the machine's wait (every submit to next) over that wait plus 8 s per row
  decision (each row with a form, every round). ``--port-base P``: the desk on port P and its
  front on P + 100 (default: free ports). With ``--screenshots DIR``: the login page, the rounds
  after logging in and each round's first form filled (``DIR/login.png``, ``DIR/rounds.png``,
  ``DIR/ROUND.png``: the pictures of docs/annotator/README.md, ``--screenshots docs/annotator``).
  Last figures (``--rows 111``, a quiet 2-core machine at load 1.3-1.9, ``uptime`` during the run)::

      TRANSCRIPT windows=23 keyboard_keys_per_row=5.00 tabs_per_row=0.00 clicks_per_row=0.00 wrong_answers=0 unseen_changes=0 submitted=yes submit_to_next_s_median=0.86
      EMOTION windows=15 keyboard_keys_per_row=8.49 tabs_per_row=1.00 clicks_per_row=0.00 wrong_answers=0 unseen_changes=0 submitted=yes submit_to_next_s_median=1.40
      VIEWPOINTS windows=15 keyboard_keys_per_row=4.47 tabs_per_row=0.00 clicks_per_row=0.00 wrong_answers=0 unseen_changes=0 submitted=yes submit_to_next_s_median=1.13
      RELATION windows=8 keyboard_keys_per_row=7.68 tabs_per_row=0.00 clicks_per_row=0.00 wrong_answers=0 unseen_changes=0 submitted=yes submit_to_next_s_median=0.76
      STRATEGY windows=8 keyboard_keys_per_row=4.14 tabs_per_row=0.49 clicks_per_row=0.00 wrong_answers=0 unseen_changes=0 submitted=yes submit_to_next_s_median=0.63
      whole interview: windows=69 wrong_answers=0 machine_wait_share=2.4% machine_wait_s=64.2 row_decisions=333

  About 6 minutes at that load (each key waits 0.08 s, a person's pace, and the page's answer).
* Extras: page height, DOM nodes, JS heap, tasks (windows) per sample, the front's start report
  (the desk's release and the bundle patches applied) and the load average (the machine is
  shared: compare figures taken under similar load).

    .venv/bin/python benchmarks/bench_annotator_ui.py [--rows 111 250] [--rounds emotion ...]
        [--repeat N] [--desks N] [--direct] [--no-media] [--work-only] [--keyboard [--whole] [--port-base P]]
        [--window N] [--screenshots DIR] [--json FILE]

About 6-15 minutes for every round at both sizes on a 2-core machine, by its speed (``--repeat 1``:
about half), plus a few minutes for the desks' figures.

The code is the package beside this script, ``benchmarks/annotator_ui/``, a module per job (its
``__init__`` lists them: ``stack``, ``oracle``, ``work``, ``browser``, ``driver``, ``pages``,
``keyboard``); the functions named above are theirs. The tests drive pages with its keyboard
driver (``from benchmarks.annotator_ui import driver``).
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# The bench's code is the package beside this script, a module per job (its __init__ lists them),
# imported as `benchmarks.annotator_ui` here as from the tests.
from benchmarks.annotator_ui.browser import CHROMIUM  # noqa: E402
from benchmarks.annotator_ui.keyboard import keyboard_main, whole_main  # noqa: E402
from benchmarks.annotator_ui.pages import pages_main  # noqa: E402
from benchmarks.annotator_ui.work import work_main  # noqa: E402
from pipeline.annotation.rounds import round_names  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="Example: .venv/bin/python benchmarks/bench_annotator_ui.py --rows 111 "
                                        "--rounds emotion relation --screenshots test-output/bench")
    ap.add_argument("--rows", type=int, nargs="+", default=[111, 250], help="sample sizes (default 111 250)")
    ap.add_argument("--rounds", nargs="+", default=list(round_names()), help="rounds (default: every round)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--work-only", action="store_true", help="only the clicks and keys per turn (no browser)")
    ap.add_argument("--window", type=int, help="units per task (default: the pipeline's)")
    ap.add_argument("--direct", action="store_true",
                    help="open the annotator's desk directly instead of through the desk's front (no asset cache, "
                         "no compression, no keys: the work figures are then counted without the front's keys)")
    ap.add_argument("--no-media", action="store_true", help="push without audio (no players load anything)")
    ap.add_argument("--page-timeout", type=float, default=240, help="seconds a page may take (default 240)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="measure each page this many times and print the medians (default 3)")
    ap.add_argument("--desks", type=int, default=4,
                    help="desks made (Desks.add) and started from cold (Desks.up) for the DESKS figures, the "
                         "annotator's among them (default 4; 0: only the annotator's desk, no DESKS figures)")
    ap.add_argument("--keyboard", action="store_true",
                    help="instead of the page figures: one whole window of every round by keyboard alone through the "
                         "front (keyboard_keys_per_row, clicks_per_row, tabs_per_row, submitted), at the first --rows")
    ap.add_argument("--whole", action="store_true",
                    help="with --keyboard: every window of every round of one interview of the first --rows in ONE "
                         "tab by keys alone, the stored answers read back against the oracle (module doc)")
    ap.add_argument("--port-base", type=int,
                    help="the desk's port (its front: this + 100); default: free ports")
    ap.add_argument("--screenshots", type=Path,
                    help="save a screenshot of each page here (e.g. test-output/bench); with --keyboard one page per "
                         "round, filled by keys, before its submit: ROUND.png (the README's are docs/annotator/)")
    args = ap.parse_args()

    if args.work_only:  # no server, no browser: the clicks and keys per turn alone
        work_main(args)
        return
    if not shutil.which(CHROMIUM):
        sys.exit("Debian chromium is not installed (scripts/setup.sh installs it)")
    if args.keyboard and args.whole:
        whole_main(args)
        return
    if args.keyboard:
        keyboard_main(args)
        return
    pages_main(args)


if __name__ == "__main__":
    main()
