"""`rescue annotate status`'s figures: rows done / total per annotator and round, drafts, last
activity and the project link, through the real server; and how the CLI prints them (80 columns)."""
from __future__ import annotations

import pytest
from ls_samples import make_sample

from pipeline.annotation import ls_config, push
from pipeline.annotation.rounds import load_round
from pipeline.annotation.status import STATUS_COLUMNS, ProjectStatus, round_status, status_rows


@pytest.mark.slow
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


def test_the_status_printout_fits_80_columns_and_names_each_persons_own_address():
    """`rescue annotate status` as printed (:func:`pipeline.cli.annotate.status_view`) on an
    80-column terminal: long e-mails and addresses wrap, every figure and each person's desk
    address is there, and the round links to its project where the terminal shows links."""
    import io

    from rich.console import Console

    from pipeline.cli.annotate import status_view

    long = "a.very.long.annotator.name@university-hospital.example.org"
    url = "https://desks.university-hospital.example.org/a-very-long-annotator-name-univers"
    desks = [(long, "annotator", True, url), ("b@x.org", "annotator", True, "http://127.0.0.1:8101"),
             ("adj@x.org", "adjudicator", False, "http://127.0.0.1:8102")]
    lines = [ProjectStatus(rnd, "family", long, 12345, f"{url}/projects/12345/data", 12000, 33300, 11, 12, 345, 1,
                           "2026-11-30T12:00:01.123Z") for rnd in ("transcript", "viewpoints")]
    lines.append(ProjectStatus("emotion", "couple", "b@x.org", 3, "http://127.0.0.1:8101/projects/3/data",
                               0, 51, 0, 0, 2, 0, None))

    def printed(width: int, terminal: bool = False) -> str:
        buf = io.StringIO()
        console = Console(width=width, file=buf, force_terminal=terminal, color_system="standard" if terminal else None)
        for part in status_view(desks, lines):
            console.print(part, highlight=False)
        return buf.getvalue()

    text = printed(80)
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80, text
    flat = "".join(text.split())  # what wrapped, joined again
    for email, role, healthy, address in desks:
        assert f"desk{email}({role}):{'up' if healthy else 'DOWN'}at{address}" in flat, text
    assert "desk b@x.org (annotator): up at http://127.0.0.1:8101" in text
    rows = [line.split() for line in text.splitlines() if line.startswith("  ") and line.split()[0] in
            ("transcript", "viewpoints", "emotion")]
    assert rows == [["transcript", "family", "12000", "/", "33300", "11", "12", "/", "345", "1", "2026-11-30", "12:00:01"],
                    ["viewpoints", "family", "12000", "/", "33300", "11", "12", "/", "345", "1", "2026-11-30", "12:00:01"],
                    ["emotion", "couple", "0", "/", "51", "0", "0", "/", "2", "0", "-"]], text
    # the order: each annotator's rows under their own desk line
    assert text.index("viewpoints") < text.index("desk b@x.org") < text.index("emotion") < text.index("desk adj@x.org")
    # a terminal that shows links: the round links to its project on the person's own desk
    linked = printed(80, terminal=True)
    assert f"\x1b]8;id=" in linked and f";{url}/projects/12345/data\x1b\\" in linked, linked
    assert status_view(desks, None)[-1].plain.startswith("desk adj@x.org")  # desks only (one is down)
    assert status_view(desks, [])[-1] == "no annotation projects yet"
