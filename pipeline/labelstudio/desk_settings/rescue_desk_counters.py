"""Label Studio's task counters in one SQL statement per 500 tasks: a Django app that
:mod:`rescue_desk_settings` adds to a desk. Run by Label Studio's python, never imported by the
pipeline.

Why: after every import Label Studio recounts the new tasks' annotations and predictions
(``tasks.functions.update_tasks_counters``) with a ``bulk_update`` that builds one ``CASE WHEN``
per task and field in Python. With a prediction on every task (a push's pre-fill) that was 29 %
of a desk's CPU in a push (py-spy); this does the same counting in SQLite. Measured
alternately: a first push of 2,852 tasks, the desks' CPU 5.0-6.2 s instead of 8.4-9.3 s.

Tied to the code it replaces, all or nothing: at start-up the original's source must hash to
:data:`WRITTEN_FOR_SHA256` (Label Studio 1.23.2's), else the desk refuses to start
(``ImproperlyConfigured``) rather than run a replacement of some other code. It counts exactly
what the original counts, for the same tasks, and returns the same number; ``from_scratch=False``
goes to the original. ``tests/annotation/test_desk_settings.py`` runs desks both ways.
"""
import hashlib
import inspect

from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured

WRITTEN_FOR_SHA256 = "25bba65538e18b039a67cc0fef9812e97c3ad99eb4bff0f9479cc7406c082871"
BATCH = 500  # ids per statement (SQLite's bound-parameter limit is 999 on old builds)

# The original's counts: annotations not cancelled, cancelled ones, predictions (each row once).
_RECOUNT = ("UPDATE task SET"
            " total_annotations = (SELECT COUNT(*) FROM task_completion a WHERE a.task_id = task.id AND a.was_cancelled = 0),"
            " cancelled_annotations = (SELECT COUNT(*) FROM task_completion a WHERE a.task_id = task.id AND a.was_cancelled = 1),"
            " total_predictions = (SELECT COUNT(*) FROM prediction p WHERE p.task_id = task.id)"
            " WHERE id IN ({})")
# what the original returns: how many of them have an annotation or a prediction
_WITH_ANY = "SELECT COUNT(*) FROM task WHERE id IN ({}) AND total_annotations + cancelled_annotations + total_predictions > 0"


def check(original) -> None:
    """Refuse to replace anything but the code this was written for."""
    found = hashlib.sha256(inspect.getsource(original).encode("utf-8")).hexdigest()
    if found != WRITTEN_FOR_SHA256:
        raise ImproperlyConfigured(f"tasks.functions.update_tasks_counters is not the code rescue_desk_counters was "
                                   f"written for (source sha256 {found}); run Label Studio's own settings "
                                   f"(RESCUE_LS_STOCK_SETTINGS=1) or check this module against it")


def replacement(original):
    def update_tasks_counters(queryset, from_scratch=True):
        if not from_scratch:
            return original(queryset, from_scratch)
        from django.db import connection
        from tasks.models import Task

        if isinstance(queryset, (list, tuple, set)):
            ids = [t.id if isinstance(t, Task) else int(t) for t in queryset]
        else:
            ids = list(queryset.values_list("id", flat=True))
        with_any = 0
        with connection.cursor() as cursor:
            for i in range(0, len(ids), BATCH):
                part = ids[i:i + BATCH]
                marks = ", ".join(["%s"] * len(part))
                cursor.execute(_RECOUNT.format(marks), part)
                cursor.execute(_WITH_ANY.format(marks), part)
                with_any += cursor.fetchone()[0]
        return with_any

    update_tasks_counters.replaces = original
    return update_tasks_counters


class CountersConfig(AppConfig):
    name = "rescue_desk_counters"
    label = "rescue_desk_counters"

    def ready(self) -> None:
        import tasks.functions as functions

        check(functions.update_tasks_counters)
        # a module that imported the name before this (none on the import's path) keeps the original: same counts
        functions.update_tasks_counters = replacement(functions.update_tasks_counters)
