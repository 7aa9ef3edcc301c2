"""Validation of samples against the RESCUE rules V1-V13 (spec §1.9).

Every check runs to the end and returns *all* violations as ``Violation`` records
(sample_id, row_index, rule, message) instead of stopping at the first. Rules that are
about the published JSONL layout (V1 key presence, V12 the shifted relation copy) are
checked where that layout is read, in ``pipeline.benchmark.paper_format``; this module checks the
sample shape of ``pipeline.rows`` (relation label on the therapist row).

Project rules beyond the spec's V1-V13 (hostile or broken inputs):

- **V14** evidence rows: ``relation_cycle_evidence_rows`` holds distinct whole numbers, each a
  0-based position of a row of the sample (``0 <= e < number of rows``), and only on therapist
  rows. Later rows are allowed: the spec (§1.6) found the paper's evidence windows include
  future rows of the therapist turn they explain, so no "before the row" rule applies to them.
- **V15** a sample has at least one row.
- **V16** no absolute path, home path, drive path or URL in any string of a sample
  (``source_file`` must be a plain relative path; every row field, nested ones too). Releases
  are built from validated samples; :func:`scan_release` checks every file of a built release.

The sample rules are :mod:`.samples`; V16's scanners (strings, Parquet tables, text files, a
built release), made fast on purpose (one RE2 kernel over whole columns and blocks, the exact
pattern only where it flags something), are :mod:`.private_scan`. Their public names are
re-exported here: callers import ``pipeline.validate``.
"""
from __future__ import annotations

from pipeline.validate.private_scan import private_strings, scan_release, scan_table, scan_text
from pipeline.validate.samples import (Violation, check_subtitle_coverage, validate_sample, validate_samples,
                                       violations_table)

__all__ = ["Violation", "check_subtitle_coverage", "private_strings", "scan_release", "scan_table", "scan_text",
           "validate_sample", "validate_samples", "violations_table"]
