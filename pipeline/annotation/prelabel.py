"""Optional model pre-annotation through an OpenAI-compatible chat endpoint (off by default).

``ModelPrelabeler(url, model)`` asks the model for a JSON object
``{"rows": [{"row_index": n, "<field>": value, ...}]}`` per sample, with the round's fields,
types and allowed values in the prompt. Its answers only pre-fill the Label Studio forms:
values outside a field's choices are dropped by :func:`ls_config.values_to_results`, and every
submitted annotation is validated on pull like any other. The model is asked for every field
('"" for none'), so an empty answer is its proposal and is pre-filled ("no clear pattern", "no
strategy"), unlike the empty values of the stores (:func:`.push.input_values`).

The request (:meth:`ModelPrelabeler.ask`) is the boundary where the endpoint's faults are seen:
no answer (refused, reset, a timeout) raises :class:`ModelUnreachable`, HTTP 5xx
:class:`ModelFault` - both of the transient family (:mod:`pipeline.errors`) - and a refusal
(HTTP 4xx) or an answer that is not the JSON asked for a plain :class:`PrelabelError`; each names
the URL. Pre-annotation is optional, so the prelabeler itself catches them: that sample gets no
pre-annotation, the reason is recorded in ``failures`` and the push goes on.
The API key, if the endpoint needs one, comes from ``RESCUE_PRELABEL_API_KEY``.
"""
from __future__ import annotations

import json
import os

import httpx

from pipeline.annotation.rounds import Field, Round
from pipeline.errors import ServerFault, Unreachable


class PrelabelError(RuntimeError):
    """The model endpoint refused the request or its answer is not the JSON asked for."""


class ModelUnreachable(PrelabelError, Unreachable):
    """The model endpoint did not answer (connection refused or reset, a timeout): transient."""


class ModelFault(PrelabelError, ServerFault):
    """The model endpoint answered with a server error (HTTP 5xx): transient."""


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
        try:
            answer = self.ask(prompt)
        except PrelabelError as exc:
            self.failures.append((sample["sample_id"], str(exc)))
            return {}
        rows_answered = answer.get("rows", [])
        if not isinstance(rows_answered, list) or not all(isinstance(item, dict) for item in rows_answered):
            self.failures.append((sample["sample_id"], f"the model endpoint {self.url} answered 'rows' that are "
                                                       "not a list of objects"))
            return {}
        out = {}
        for item in rows_answered:
            ri = item.get("row_index")
            if isinstance(ri, int):
                out[ri] = {f.name: item[f.name] for f in rnd.fields if f.name in item}
        return out

    def ask(self, prompt: str) -> dict:
        """The model's JSON object for ``prompt``; raises :class:`ModelUnreachable`,
        :class:`ModelFault` or :class:`PrelabelError` (see the module), naming the URL."""
        url = f"{self.url}/chat/completions"
        headers = {}
        if os.environ.get("RESCUE_PRELABEL_API_KEY"):
            headers["Authorization"] = f"Bearer {os.environ['RESCUE_PRELABEL_API_KEY']}"
        try:
            r = httpx.post(url, headers=headers, timeout=self.timeout, json={
                "model": self.model, "temperature": 0, "response_format": {"type": "json_object"},
                "messages": [{"role": "user", "content": prompt}]})
        except httpx.TransportError as exc:
            raise ModelUnreachable(f"the model endpoint {url} did not answer ({type(exc).__name__})") from None
        if r.status_code >= 500:
            raise ModelFault(f"the model endpoint {url} failed (HTTP {r.status_code})")
        if r.status_code >= 400:
            raise PrelabelError(f"the model endpoint {url} refused the request (HTTP {r.status_code}): "
                                f"{r.text[:200]}")
        try:
            answer = json.loads(r.json()["choices"][0]["message"]["content"])
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise PrelabelError(f"the model endpoint {url} answered no chat completion holding a JSON object "
                                f"({type(exc).__name__}: {str(exc)[:200]})") from None
        if not isinstance(answer, dict):
            raise PrelabelError(f"the model endpoint {url} answered {type(answer).__name__}, not a JSON object")
        return answer
