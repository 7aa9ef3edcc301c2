"""Annotation-test fixtures. The Label Studio server (``ls_server``, ``ls_client``) is the
session-wide one of tests/conftest.py; tests keep apart by using their own annotators."""
from __future__ import annotations

import itertools
import re

import pytest

_counter = itertools.count()


@pytest.fixture
def new_annotators(ls_desks, request):
    """``make(n)`` -> n fresh annotator e-mails, each with a "desk" in ``ls_desks`` (unique per test)."""
    def make(n: int = 2) -> list[str]:
        stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:30].strip("-")
        out = []
        for _ in range(n):
            email = f"{stem}-{next(_counter)}@rescue.test"
            ls_desks.add(email)
            out.append(email)
        return out
    return make
