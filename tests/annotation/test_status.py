"""`rescue annotate status`'s figures: rows done / total per annotator and round, drafts, last
activity and the project link, through the real server."""
from __future__ import annotations

import pytest
from ls_samples import make_sample

from pipeline.annotation import ls_config, push
from pipeline.annotation.rounds import load_round
from pipeline.annotation.status import STATUS_COLUMNS, round_status, status_rows

pytestmark = pytest.mark.slow


def test_status_counts_rows_drafts_and_windows(ls_client, ls_desks, new_annotators):
    sample = make_sample("synthetic/status_045", "family", 45)  # 45 transcript units: 3 windows
    short = make_sample("synthetic/status_006", "family", 6)
    a, b = new_annotators(2)
    report = push.push_round(ls_desks, "transcript", [sample, short], [a, b], window=20)
    rnd = load_round("transcript")
    users = {u["email"]: u["id"] for u in ls_client.users()}
    pid = report.projects[push.project_key("transcript", "family", a)]
    tasks = ls_client.tasks(pid)
    windows = sorted((t for t in tasks if t["data"]["sample_id"] == sample["sample_id"]),
                     key=lambda t: t["data"]["window"]["index"])
    values = push.input_values(rnd, sample)
    for t in windows[:2]:
        ls_client.create_annotation(t["id"], ls_config.values_to_results(rnd, t["data"], values),
                                    completed_by=users[a])
    other = next(t for t in tasks if t["data"]["sample_id"] == short["sample_id"])
    ls_client._json("POST", f"/api/tasks/{other['id']}/drafts", "save a draft", json={"result": [], "lead_time": 2})

    lines = {s.annotator: s for s in round_status(ls_desks, ["transcript"], [a, b])}
    sa, sb = lines[a], lines[b]
    done = sum(len(t["data"]["units"]) for t in windows[:2])
    assert (sa.rows_done, sa.rows_total, sa.samples_done, sa.samples_total, sa.drafts) == (done, 51, 0, 2, 1)
    assert sa.last_activity and sa.url == f"{ls_client.url}/projects/{pid}/data"
    assert (sb.rows_done, sb.rows_total, sb.drafts, sb.last_activity) == (0, 51, 0, None)
    # the table as `rescue annotate status` prints it and the annotation-round run publishes it
    rows = {r["annotator"]: r for r in status_rows([sa, sb])}
    assert list(rows[a]) == list(STATUS_COLUMNS)
    assert rows[a] == {"round": "transcript", "scenario": "family", "annotator": a, "rows done": f"{done} / 51",
                       "skipped": "0", "samples done": "0 / 2", "drafts": "1",
                       "last activity": sa.last_activity[:19].replace("T", " "), "project": sa.url}
    assert (rows[b]["rows done"], rows[b]["drafts"], rows[b]["last activity"]) == ("0 / 51", "0", "-")
    ls_client.create_annotation(windows[2]["id"], ls_config.values_to_results(rnd, windows[2]["data"], values),
                                completed_by=users[a])
    again = {s.annotator: s for s in round_status(ls_desks, ["transcript"], [a])}[a]
    assert (again.rows_done, again.samples_done) == (45, 1)
