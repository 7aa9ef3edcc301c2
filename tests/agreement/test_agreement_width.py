"""`rescue agreement` on an 80-column terminal: the gate and the counts fit, no name is cut."""
from __future__ import annotations

from pipeline import corpus
from pipeline.annotation.rounds import round_names
from tests.agreement.test_agreement_cli import _write_round
from tests.cli_width import assert_tables_fit, at_80_columns
from pipeline.paths import DataRoot


def test_every_rounds_tables_fit_80_columns_with_whole_names(tmp_path, truth_samples, draft_of):
    root = tmp_path / "data"
    corpus.save_corpus(DataRoot(root), draft_of(truth_samples))
    for name in round_names():
        _write_round(root, name, truth_samples, 0.3)
    for name in round_names():
        out = at_80_columns("agreement", name, "--data-root", str(root))
        assert_tables_fit(out)
        for field in ("relation_pattern", "viewpoints_attitudes.source", "internal_emotion.intensity"):
            if field.split(".")[0] in out:
                assert f" {field.split('.')[0]}" in out  # whole, not folded or cut
        assert "report: " + str(root) in out  # the path is one line, whole
