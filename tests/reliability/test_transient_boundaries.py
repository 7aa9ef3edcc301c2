"""The transient family where the last raw HTTP calls of the annotation code meet the network, on
real sockets and real HTTP servers: a desk's signup form (reached without the API client), the
model endpoint of pre-annotation, and the health probes of a Label Studio server. No answer is
Unreachable, HTTP 5xx a ServerFault, each naming the URL; a refusal (4xx, a bad answer) is not
transient; a probe answers "not healthy" and raises nothing."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from http_util import answering, closed_port

from pipeline.labelstudio.client import LabelStudioError, LabelStudioFault, LabelStudioUnavailable
from pipeline.labelstudio.desks import DeskError, Desks
from pipeline.annotation.prelabel import ModelFault, ModelPrelabeler, ModelUnreachable, PrelabelError
from pipeline.annotation.rounds import load_round
from pipeline.labelstudio.server import LabelStudioServer
from pipeline.config import Settings
from pipeline.errors import ServerFault, TransientError, Unreachable
from pipeline.paths import DataRoot

INVITE = "/user/signup/?token=invite-secret-0123"
PERSON = "ann@rescue.test"


# --- a desk's signup form ------------------------------------------------------------------

def _desk(tmp_path, url: str):
    """A registered desk on a fresh data root, reached at ``url`` (no Label Studio started)."""
    desks = Desks(DataRoot(tmp_path), dataclasses.replace(Settings.from_env(tmp_path), desk_url=url))
    return desks, desks.register(PERSON, "annotator")


@contextlib.contextmanager
def _invite_then_hang_up() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server that gives the invite link (``/api/invite``) and then drops every other
    request without an answer, as a server that dies mid-signup does."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(f"{self.command} {self.path}")
            if self.path.startswith("/api/invite"):
                body = json.dumps({"invite_url": INVITE}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            else:
                self.close_connection = True  # no status line, no headers: the connection just ends

        do_POST = do_GET

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_a_signup_form_that_hangs_up_is_unreachable_naming_the_form(tmp_path):
    with _invite_then_hang_up() as (url, seen):
        desks, desk = _desk(tmp_path, url)
        try:
            with pytest.raises(LabelStudioUnavailable) as err:
                desks._sign_up(desk, "a-long-password-1")
        finally:
            desks.close()
    assert isinstance(err.value, Unreachable) and isinstance(err.value, LabelStudioError)
    message = str(err.value)
    assert f"{url}/user/signup/" in message and PERSON in message and "RemoteProtocolError" in message
    assert "invite-secret" not in message and "a-long-password-1" not in message  # no secret in an error
    assert seen[0] == "GET /api/invite" and seen[1] == f"GET {INVITE}"


@pytest.mark.parametrize("statuses,asked", [((200, 503), 2), ((200, 200, 502), 3)])
def test_a_signup_form_answering_a_server_error_is_a_transient_fault(tmp_path, statuses, asked):
    """503 on showing the form (nothing is posted), 502 on posting it."""
    with answering(*statuses, body={"invite_url": INVITE}) as server:
        desks, desk = _desk(tmp_path, server.url)
        try:
            with pytest.raises(LabelStudioFault) as err:
                desks._sign_up(desk, "a-long-password-1")
        finally:
            desks.close()
    assert isinstance(err.value, ServerFault) and f"(HTTP {statuses[-1]})" in str(err.value)
    assert f"{server.url}/user/signup/" in str(err.value) and "invite-secret" not in str(err.value)
    assert len(server.paths) == asked and server.paths[0] == "GET /api/invite"


def test_a_signup_the_form_refuses_is_a_desk_error_not_transient(tmp_path):
    """The form shown again (HTTP 200 instead of the redirect of a made login): asking again
    would be refused again."""
    with answering(200, 200, 200, body={"invite_url": INVITE}) as server:
        desks, desk = _desk(tmp_path, server.url)
        try:
            with pytest.raises(DeskError) as err:
                desks._sign_up(desk, "short")
        finally:
            desks.close()
    assert not isinstance(err.value, TransientError) and "refused the login (HTTP 200" in str(err.value)
    assert [p.split(" ")[0] for p in server.paths] == ["GET", "GET", "POST"]


# --- the model endpoint of pre-annotation --------------------------------------------------

def _sample() -> dict:
    rows = [{"row_index": i, "primary_speaker": "Ann" if i % 2 else "Therapist", "target": ["Bo"],
             "dialogue_cleaned": f"line {i}", "start_time": float(i), "end_time": i + 0.5} for i in (1, 2, 3)]
    return {"sample_id": "synthetic/boundary_001", "scenario": "couple", "participants": ["Ann", "Bo"],
            "rows": rows}


def test_a_model_endpoint_that_refuses_the_connection_is_unreachable():
    with closed_port() as port:
        labeler = ModelPrelabeler(f"http://127.0.0.1:{port}/v1", "stand-in", timeout=5)
        with pytest.raises(ModelUnreachable) as err:
            labeler.ask("hello")
        assert labeler(load_round("emotion"), _sample()) == {}  # the push goes on without it
    assert isinstance(err.value, Unreachable) and isinstance(err.value, PrelabelError)
    assert f"http://127.0.0.1:{port}/v1/chat/completions" in str(err.value) and "ConnectError" in str(err.value)
    assert labeler.failures == [("synthetic/boundary_001", str(err.value))]


def test_a_model_endpoint_too_slow_to_answer_is_unreachable():
    with answering(200, delay_s=2.0) as server:
        with pytest.raises(ModelUnreachable) as err:
            ModelPrelabeler(server.url, "stand-in", timeout=0.3).ask("hello")
    assert isinstance(err.value, Unreachable) and "ReadTimeout" in str(err.value)


@pytest.mark.parametrize("status", [500, 503])
def test_a_model_endpoint_server_error_is_a_transient_fault(status):
    with answering(status) as server:
        labeler = ModelPrelabeler(server.url, "stand-in")
        with pytest.raises(ModelFault) as err:
            labeler.ask("hello")
    assert isinstance(err.value, ServerFault) and f"(HTTP {status})" in str(err.value)
    assert f"{server.url}/chat/completions" in str(err.value) and server.paths == ["POST /chat/completions"]


@pytest.mark.parametrize("status,body,says", [
    (400, {"error": "bad model"}, "refused the request (HTTP 400)"),
    (200, {"choices": []}, "no chat completion holding a JSON object (IndexError"),
    (200, {"choices": [{"message": {"content": "not json"}}]}, "(JSONDecodeError"),
    (200, {"choices": [{"message": {"content": "[1, 2]"}}]}, "answered list, not a JSON object"),
])
def test_a_model_endpoint_refusal_or_bad_answer_is_not_transient(status, body, says):
    with answering(status, body=body) as server:
        labeler = ModelPrelabeler(server.url, "stand-in")
        with pytest.raises(PrelabelError) as err:
            labeler.ask("hello")
        assert labeler(load_round("emotion"), _sample()) == {} and len(labeler.failures) == 1
    assert not isinstance(err.value, TransientError) and says in str(err.value)
    assert server.url in labeler.failures[0][1]


def test_model_rows_of_the_wrong_shape_are_a_recorded_failure():
    answer = {"rows": {"row_index": 1}}  # an object where a list of objects belongs
    with answering(200, body={"choices": [{"message": {"content": json.dumps(answer)}}]}) as server:
        labeler = ModelPrelabeler(server.url, "stand-in")
        assert labeler(load_round("emotion"), _sample()) == {}
    assert labeler.failures == [("synthetic/boundary_001", f"the model endpoint {server.url} answered 'rows' "
                                                           "that are not a list of objects")]


# --- the health probes of a Label Studio server --------------------------------------------

def test_the_health_probes_answer_not_healthy_and_raise_nothing(tmp_path):
    """A refused port, a server error, an answer that is JSON but no object: not healthy, no
    version - never a raw httpx error, never the transient family (a probe asks, it needs nothing)."""
    with closed_port() as port:
        server = LabelStudioServer(tmp_path / "ls", port=port)
        assert server.healthy(timeout=1) is False and server.version() is None
    for status, body in ((500, {"status": "UP"}), (200, ["UP"])):
        with answering(status, then=status, body=body) as stand_in:
            server = LabelStudioServer(tmp_path / "ls", port=int(stand_in.url.rsplit(":", 1)[1]))
            assert server.healthy(timeout=1) is False and server.version() is None
            assert stand_in.paths == ["GET /health", "GET /api/version"]
    with answering(200, body={"status": "UP", "release": "1.23.2"}) as stand_in:  # the probe does see a server
        server = LabelStudioServer(tmp_path / "ls", port=int(stand_in.url.rsplit(":", 1)[1]))
        assert server.healthy(timeout=1) is True and server.version() == "1.23.2"
