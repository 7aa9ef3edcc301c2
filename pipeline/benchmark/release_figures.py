"""The figures a release's manifest (and so its dataset card) carries about its data: the
paper's Table 3 statistics, the Table 6 instance counts per scenario, each task's label
distribution, and what each annotation round behind the corpus contributed. Read by
:func:`pipeline.benchmark.release.build_release`.
"""
from __future__ import annotations


import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline import taxonomy
from pipeline.annotation import pushed
from pipeline.paths import DataRoot, InvalidId

LABEL_TASKS = ("itp", "rpp", "stp", "ssp")  # tasks with a categorical label


def count_by_scenario(table: pa.Table) -> dict:
    count_all = pc.CountOptions(mode="all")
    g = table.group_by("scenario").aggregate([("sample_id", "count", count_all),
                                              ("sample_id", "count_distinct", count_all)])
    got = {s: {"instances": n, "samples": d} for s, n, d in
           zip(*(g[c].to_pylist() for c in ("scenario", "sample_id_count", "sample_id_count_distinct")))}
    out = {s: got.get(s, {"instances": 0, "samples": 0}) for s in taxonomy.SCENARIOS}
    out["all"] = {"instances": table.num_rows, "samples": pc.count_distinct(table["sample_id"], mode="all").as_py()}
    return out


def label_distribution(task: str, table: pa.Table) -> dict:
    if task in LABEL_TASKS:
        values = table["label"]
    elif task == "er":  # intensity histogram
        values = pc.fill_null(pc.cast(table["label_intensity"], pa.string()), "None")
    else:  # vp: gold viewpoints per instance
        values = pc.cast(pc.list_value_length(table["label"]), pa.string())
    t = pa.table({"scenario": table["scenario"], "value": values})

    def counts(keys: list[str]) -> pa.Table:
        return t.group_by(keys + ["value"]).aggregate([([], "count_all")])

    per = counts(["scenario"])
    out = {s: {} for s in taxonomy.SCENARIOS}
    for s, v, n in zip(*(per[c].to_pylist() for c in ("scenario", "value", "count_all"))):
        if s in out:
            out[s][v] = n
    every = counts([])
    out["all"] = dict(zip(every["value"].to_pylist(), every["count_all"].to_pylist()))
    return {s: dict(sorted(d.items())) for s, d in out.items()}


def statistics(samples_t: pa.Table, rows_t: pa.Table) -> dict:
    """The paper's Table 3: per couple / family / all (speakers count the therapist)."""
    is_t = pc.equal(rows_t["primary_speaker"], taxonomy.THERAPIST)
    per_sample = pa.table({"sample_id": rows_t["sample_id"], "end": rows_t["end_time"],
                           "t": pc.cast(is_t, pa.int64())}).group_by("sample_id").aggregate(
        [("sample_id", "count"), ("end", "max"), ("t", "sum")])
    agg = {sid: (n, end, t) for sid, n, end, t in zip(*(per_sample[c].to_pylist() for c in
                                                        ("sample_id", "sample_id_count", "end_max", "t_sum")))}
    out = {}
    meta = samples_t.select(["sample_id", "scenario", "participants", "duration_s"]).to_pylist()
    for scenario in (*taxonomy.SCENARIOS, "all"):
        n = turns = therapist = 0
        seconds = speakers = 0.0
        for m in meta:
            if scenario != "all" and m["scenario"] != scenario:
                continue
            rows, last_end, t = agg.get(m["sample_id"], (0, None, 0))
            n += 1
            turns += rows
            therapist += t
            seconds += m["duration_s"] if m["duration_s"] is not None else (last_end or 0.0)
            speakers += len(m["participants"] or []) + (1 if t else 0)
        minutes = seconds / 60
        out[scenario] = {
            "samples": n,
            "total_duration_min": round(minutes, 1),
            "total_turns": turns,
            "avg_duration_min": round(minutes / n, 2) if n else 0.0,
            "avg_turns": round(turns / n, 2) if n else 0.0,
            "avg_speakers": round(speakers / n, 2) if n else 0.0,
            "therapist_turn_share": round(therapist / turns, 4) if turns else 0.0,
        }
    return out


def simulated_people(root: DataRoot) -> set[str]:
    """Who is registered as a simulated annotator (the desks' registry: ``rescue annotators add
    --simulated``), lower-cased: what the card counts as simulated, never a name's look."""
    from pipeline.labelstudio.desks import DeskError, Desks

    try:
        return {e.lower() for e in Desks(root).simulated()}
    except DeskError:
        return set()


def annotation_rounds(root: DataRoot, gate_list: list[dict]) -> list[dict]:
    """Per round behind the corpus, for the manifest and the card: annotators (a count, and how
    many are simulated - never their names), units, adjudicated rows, the gate's figures and the
    override that lets a failing round through."""
    simulated = simulated_people(root) if gate_list else set()
    out = []
    for g in gate_list:
        rec = {"round": g["round"], "passed": g["passed"], "fields": g["fields"], "override": g["override"],
               "annotators": max((f.get("n_annotators") or 0 for f in g["fields"]), default=0),
               "simulated_annotators": 0, "units": None, "adjudicated_rows": 0, "prefilled": []}
        try:  # fields the round's pushes really pre-filled (the push record, not the round's definition)
            rec["prefilled"] = pushed.prefilled_fields(root, g["round"])
        except (KeyError, ValueError, OSError):
            pass
        try:
            labels_path, adj_path = root.labels(g["round"]), root.adjudications(g["round"])
        except InvalidId:
            out.append(rec)
            continue
        if labels_path.is_file():
            t = pq.read_table(labels_path, columns=["annotator", "sample_id", "row_index"])
            anns = set(t["annotator"].to_pylist())
            rec["annotators"] = len(anns)
            rec["simulated_annotators"] = len({str(a).lower() for a in anns} & simulated)
            rec["units"] = len(set(zip(t["sample_id"].to_pylist(), t["row_index"].to_pylist())))
        if adj_path.is_file():
            t = pq.read_table(adj_path, columns=["sample_id", "row_index"])
            rec["adjudicated_rows"] = len(set(zip(t["sample_id"].to_pylist(), t["row_index"].to_pylist())))
        out.append(rec)
    return out
