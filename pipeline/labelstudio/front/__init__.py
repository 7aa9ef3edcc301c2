"""The desk's front: comforts (cached build, service worker, keys, slimmed flags and columns,
checked bundle patches) in front of ONE person's own Label Studio. It decides nothing about who
may see what: every person has their own desk (``pipeline.labelstudio.desks``).

A layer above ``pipeline`` (it imports pipeline's Label Studio pin and client limits; pipeline
never imports it)."""
from __future__ import annotations

from pipeline.labelstudio.front.app import FrontServer, StartReport, main, make_app, serve

__all__ = ["FrontServer", "StartReport", "main", "make_app", "serve"]
