"""Where each annotation of a round was first pulled from, so that one moved later is caught.

Label Studio lets a login change an annotation's task or author through its API. The ledger
(``DataRoot.annotation_ledger``) keeps, per annotation, the task (sample and window) and author
it was first pulled with; the pull (:func:`.pull.pull_round`) reports an annotation found later
elsewhere and never counts it.
"""
from __future__ import annotations

import json

from pipeline import store
from pipeline.annotation.parse import author_id
from pipeline.paths import DataRoot


class Ledger:
    """A round's ledger: ``(annotator, annotation id, created_at) -> (sample_id, window index,
    author id)``; entries are only ever added."""

    def __init__(self, root: DataRoot, round_name: str):
        self.path = root.annotation_ledger(round_name)
        self.seen: dict[str, list] = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.added = False

    def check(self, annotator: str, tasks: list[dict]) -> dict[int, str]:
        """``annotation id -> how it moved`` of the export's annotations (windows not stitched:
        a window is a task of its own); those first seen now are added."""
        moved: dict[int, str] = {}
        for task in tasks:
            data = task.get("data") or {} if isinstance(task, dict) else {}
            window = (data.get("window") or {}).get("index")
            for a in task.get("annotations") or [] if isinstance(task, dict) else []:
                key = f"{annotator}|{a.get('id')}|{a.get('created_at')}"
                now = [data.get("sample_id"), window, author_id(a.get("completed_by"))]
                first = self.seen.get(key)
                if first is None:
                    self.seen[key] = now
                    self.added = True
                elif first[:2] != now[:2]:
                    moved[a.get("id")] = f"moved from {first[0]} window {first[1]} to {now[0]} window {now[1]}"
                elif first[2] != now[2]:
                    moved[a.get("id")] = f"its author changed from user {first[2]} to user {now[2]}"
        return moved

    def write(self) -> None:
        if self.added:
            store.atomic_write_text(self.path, store.canonical_json(self.seen))
