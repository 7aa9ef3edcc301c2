"""Optional model pre-annotation through an OpenAI-compatible chat endpoint (off by default).

``ModelPrelabeler(url, model)`` asks the model for a JSON object
``{"rows": [{"row_index": n, "<field>": value, ...}]}`` per sample, with the round's fields,
types and allowed values in the prompt. Its answers only pre-fill the Label Studio forms:
values outside a field's choices are dropped by :func:`ls_config.values_to_results`, and every
submitted annotation is validated on pull like any other. The model is asked for every field
('"" for none'), so an empty answer is its proposal and is pre-filled ("no clear pattern", "no
strategy"), unlike the empty values of the stores (:func:`.push.input_values`). A failing request leaves that
sample without pre-annotation and is recorded in ``failures``; the push goes on.
The API key, if the endpoint needs one, comes from ``RESCUE_PRELABEL_API_KEY``.
"""
from __future__ import annotations

import json
import os

import httpx

from pipeline.annotation.rounds import Field, Round


def _describe(f: Field, scenario: str, participants: list[str], n_rows: int) -> str:
    if f.type == "records":
        subs = "; ".join(_describe(s, scenario, participants, n_rows) for s in f.subfields)
        return f"{f.name}: list (at most {f.max_items}) of objects with {{{subs}}}"
    if f.type == "const":
        return f"{f.name}: always {f.const!r}"
    kind = {"text": "short text", "number": f"integer {f.minimum:g}-{f.maximum:g}" if f.maximum is not None
            else "integer", "rows": "list of 0-based row positions"}.get(f.type)
    if f.type in ("choice", "multichoice"):
        opts = [o for o in f.options(scenario, participants, n_rows) if o != f.empty_choice]
        empty = ' or "" for none' if f.empty_choice else ""
        kind = ("one of " if f.type == "choice" else "list of ") + json.dumps(opts) + empty
    return f"{f.name}: {kind}"


class ModelPrelabeler:
    def __init__(self, url: str, model: str, timeout: float = 120.0):
        self.url = url.rstrip("/")
        self.model = model
        self.timeout = timeout
        self.failures: list[tuple[str, str]] = []  # (sample_id, reason)

    @property
    def source(self) -> str:
        return f"model-{self.model}"

    def __call__(self, rnd: Round, sample: dict) -> dict[int, dict]:
        rows = [r for r in sample["rows"] if rnd.applies(r.get("primary_speaker"))]
        if not rows:
            return {}
        scenario, participants = sample["scenario"], list(sample.get("participants") or [])
        fields = "\n".join(f"- {_describe(f, scenario, participants, len(sample['rows']))}" for f in rnd.fields)
        dialogue = [{"row_index": r["row_index"], "speaker": r.get("primary_speaker"),
                     "target": r.get("target"), "text": r.get("dialogue_cleaned")} for r in sample["rows"]]
        prompt = (f"{rnd.instructions}\n\nAnnotate rows {[r['row_index'] for r in rows]} of this {scenario} "
                  f"therapy dialogue. Fields:\n{fields}\n\nReturn JSON only: "
                  '{"rows": [{"row_index": <int>, <field>: <value>, ...}]}\n\n'
                  f"Dialogue:\n{json.dumps(dialogue, ensure_ascii=False)}")
        headers = {}
        if os.environ.get("RESCUE_PRELABEL_API_KEY"):
            headers["Authorization"] = f"Bearer {os.environ['RESCUE_PRELABEL_API_KEY']}"
        try:
            r = httpx.post(f"{self.url}/chat/completions", headers=headers, timeout=self.timeout, json={
                "model": self.model, "temperature": 0, "response_format": {"type": "json_object"},
                "messages": [{"role": "user", "content": prompt}]})
            r.raise_for_status()
            content = r.json()["choices"][0]["message"]["content"]
            answer = json.loads(content)
            out = {}
            for item in answer.get("rows", []):
                ri = item.get("row_index")
                if isinstance(ri, int):
                    out[ri] = {f.name: item[f.name] for f in rnd.fields if f.name in item}
            return out
        except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError) as exc:
            self.failures.append((sample["sample_id"], f"{type(exc).__name__}: {str(exc)[:200]}"))
            return {}
