"""What an annotator meets in the browser, cut by job; ``benchmarks/bench_annotator_ui.py`` is
its command line and says what it measures. Each module imports only from those above it here
(and this file's ``REPO``):

- ``stack``: the desks under a throw-away data root, the interview pushed to them, the desk's
  front in a process of its own, the media, and the desks' figures (``DESKS`` lines).
- ``oracle``: the generated family interview, the answers meant for each of its fields, and the
  judge of what a desk stored (``wrong_answers``).
- ``work``: the clicks and keys per turn counted from the pushed config (``--work-only``).
- ``browser``: Chromium, the login, a form ready on the page, page timings and the key echo.
- ``driver``: the keyboard driver: an annotator played by keys alone through the front's keys
  (``KeyCounter``, ``keyboard_form``, ``keyboard_window``, ``whole_round``), which the tests
  import too.
- ``pages``: the page figures (the default run).
- ``keyboard``: ``--keyboard`` (one window of every round) and ``--keyboard --whole`` (a whole
  interview in one tab, read back against the oracle), their lines and screenshots.
"""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
