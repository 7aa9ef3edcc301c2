"""What the operator's terminal says about a batch, through the real stack (Prefect server +
process worker, `prefect deployment run ... --watch` as the operator types it, `rescue batch
watch`): a batch with one good synthetic interview (real speech, ffmpeg, the offline pyannote
pipeline) and one broken video, fanned out to one ``ingest-interview`` run per interview, and a
batch whose ``batch_dir`` does not exist.

- The quarantine: rc 0, one line naming the interview, its manifest line and the reason in the
  --watch output; the broken interview's child run ends Completed, named "Quarantined", and its
  log holds that one WARNING line and no ERROR line, no NotReady stage, no traceback (Prefect's
  "Unexpected result for failed state" TypeError was one, in the worker's log too).
- The wrong batch_dir: rc 1, one line naming the parameter, the run Refused, no traceback.
- `rescue batch watch`: a progress bar line of the finished batch, then each interview by name,
  the broken one with its manifest line and reason; by default the latest ingest-batch run.
(The other terminal cases: tests/flows/test_build_release_refused.py for a refused release,
tests/flows/test_annotation_round.py for a round waiting for adjudication.)
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.config import REPO_ROOT

pytestmark = pytest.mark.slow

GOOD, BROKEN = "termtest/t0", "termtest/broken"
REASON = "ingest: MediaError: broken.mp4: unreadable or corrupt media"


def _flat(proc) -> str:
    """The command's output as one line of words (the terminal wraps long lines)."""
    return " ".join((proc.stdout + proc.stderr).split())


def _says(proc, line: str) -> bool:
    """Whether the output holds ``line``, wherever the terminal wrapped it (Prefect's --watch
    wraps an event's text at the terminal's width, inside a word too)."""
    return "".join(line.split()) in "".join((proc.stdout + proc.stderr).split())


def _run_id(proc) -> str:
    text = proc if isinstance(proc, str) else proc.stdout
    found = re.search(r"UUID: ([0-9a-f-]{36})", text)
    assert found, text[-3000:]
    return found.group(1)


def _logs(stack, run_id) -> list[tuple[int, str]]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    with stack.prefect_settings(), get_client(sync_client=True) as client:
        return [(log.level, log.message) for log in client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])))]


def _children(stack, run_id) -> dict[str, object]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    with stack.prefect_settings(), get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[run_id])))
    return {run.name.rsplit(":", 1)[1]: run for run in runs}


@pytest.fixture(scope="module")
def batch_run(stack, tmp_path_factory):
    """The batch, run once as the operator runs it (push=false: no desks needed here), and
    followed meanwhile from a second terminal by `rescue batch watch` with the run's name:
    ``(prefect's --watch, rescue batch watch's, the run's id)``, each a CompletedProcess."""
    from prefect.client.orchestration import get_client

    from pipeline.synthetic import interviews as synth

    batch = tmp_path_factory.mktemp("term-batch")
    synth.make_batch(batch, [{"name": "t0", "scenario": "couple", "seed": 11, "n_rows": 6, "group": "termtest"}])
    (batch / "broken.mp4").write_bytes(b"this is not a video")
    with open(batch / "manifest.csv", "a") as fh:
        fh.write(f"{BROKEN},couple,broken.mp4,Ann;Bob,,,\n")
    watch = _start(stack, "prefect", "deployment", "run", "ingest-batch/default", "--param", f"batch_dir={batch}",
                   "--param", f"data_root={stack.root / 'terminal'}", "--param", "push=false",
                   "--param", "chunk_size=1", "--watch")  # a child run per interview
    head = []
    try:
        for line in watch.stdout:  # until it has said the run's name (then the run exists)
            head.append(line)
            if "UUID:" in line:
                break
        name = re.search(r"Created flow run '([^']+)'", "".join(head)).group(1)
        follower = _start(stack, "rescue", "batch", "watch", name, "--interval", "0.5")
        with stack.prefect_settings(), get_client(sync_client=True) as client:  # it follows a batch still running
            followed_live = not client.read_flow_run(_run_id("".join(head))).state.is_final()
        followed = _finish(follower)
        followed.live = followed_live
        proc = _finish(watch, "".join(head))
    finally:
        for p in (watch, locals().get("follower")):
            if p is not None and p.poll() is None:
                p.kill()
    return proc, followed, _run_id(proc)


def _start(stack, exe: str, *args: str):
    return subprocess.Popen([str(Path(sys.executable).with_name(exe)), *args], cwd=REPO_ROOT,
                            env={**os.environ, **stack.env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _finish(proc, before: str = "", timeout: float = 900) -> subprocess.CompletedProcess:
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, before + out, err)


def test_a_quarantine_is_one_line_and_its_child_run_says_quarantined_without_a_traceback(stack, batch_run):
    proc, _, run_id = batch_run
    out = _flat(proc)
    assert proc.returncode == 0, out[-4000:]
    assert "in 'Completed (1 quarantined)'" in out, out[-3000:]
    said = f"{BROKEN} quarantined (manifest.csv line 3): {REASON}"
    assert "".join(out.split()).count("".join(said.split())) == 1, out[-4000:]  # wherever the terminal wrapped it
    assert "Traceback" not in out and "TypeError" not in out

    children = _children(stack, run_id)
    assert set(children) == {GOOD, BROKEN}, sorted(children)
    assert children[GOOD].state.name == "Completed", children[GOOD].state
    broken = children[BROKEN].state
    assert broken.is_completed() and broken.name == "Quarantined", (broken.name, broken.message)
    assert broken.message.startswith(f"{BROKEN} quarantined: {REASON}"), broken.message
    logs = _logs(stack, children[BROKEN].id)
    assert [msg for level, msg in logs if level == 30] and all(
        msg.startswith(f"{BROKEN} quarantined: {REASON}") for level, msg in logs if level == 30), logs
    assert len([1 for level, _ in logs if level == 30]) == 1, logs
    assert not [msg for level, msg in logs if level >= 40], logs
    assert not [msg for _, msg in logs if "Traceback" in msg or "NotReady" in msg or "TypeError" in msg], logs
    batch_logs = _logs(stack, run_id)
    quarantines = [msg for level, msg in batch_logs if level == 30 and BROKEN in msg]
    assert len(quarantines) == 1 and quarantines[0].startswith(said), batch_logs
    assert not [msg for _, msg in batch_logs if "Traceback" in msg], batch_logs
    for log in (stack.root / "stack" / "logs").glob("*.log"):  # the worker prints its flow runs' output
        assert "Unexpected result for failed state" not in log.read_text(errors="replace"), log


def test_rescue_batch_watch_names_each_interview_and_the_reason(stack, batch_run):
    from prefect.client.orchestration import get_client

    _, followed, run_id = batch_run
    with stack.prefect_settings(), get_client(sync_client=True) as client:
        name = client.read_flow_run(run_id).name

    def check(proc) -> list[str]:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        lines = proc.stdout.splitlines()
        assert lines[0].startswith(f"ingest-batch run {name} ({run_id}): batch "), lines
        assert any(re.search(r"interviews .* 2/2 done 1, cached 0, quarantined 1", line) for line in lines), lines
        assert f"ingest-batch run {name} ended Completed (1 quarantined): 1 done, 0 cached, 1 quarantined" in lines
        assert any(line.split() == [GOOD, "done"] for line in lines), lines
        assert any(line.strip().startswith(f"{BROKEN}  quarantined (manifest.csv line 3): {REASON}")
                   for line in lines), lines
        assert "Traceback" not in proc.stdout + proc.stderr
        return lines

    assert followed.live, "rescue batch watch started after the batch had ended"
    check(followed)  # started with the batch, followed it to its end
    lines = check(stack.rescue("batch", "watch", name))  # the finished batch
    # no RUN: the latest ingest-batch run (this one: the only batch this module ran so far)
    latest = stack.rescue("batch", "watch")
    assert latest.returncode == 0 and latest.stdout.splitlines()[0] == lines[0], latest.stdout + latest.stderr


def test_a_wrong_batch_dir_is_one_line_and_rc_1_without_a_traceback(stack, tmp_path):
    missing = tmp_path / "no-such-batch"
    proc = stack.prefect("deployment", "run", "ingest-batch/default", "--param", f"batch_dir={missing}",
                         "--param", f"data_root={stack.root / 'terminal'}", "--watch")
    out = _flat(proc)
    line = f"flow parameter batch_dir={str(missing)!r}: batch folder {missing} does not exist"
    assert proc.returncode == 1, out[-3000:]
    assert "'Refused'" in out and _says(proc, line), out[-3000:]
    assert "Traceback" not in out
    logs = _logs(stack, _run_id(proc))
    assert [msg for level, msg in logs if level >= 40] == [line], logs
    assert not [msg for _, msg in logs if "Traceback" in msg], logs
    watched = stack.rescue("batch", "watch")  # the latest batch run: this one, refused
    assert watched.returncode == 1 and "ended Refused" in watched.stdout and _says(watched, line), watched.stdout
    # the CLI path (`rescue ingest`, no Prefect) says it in one line too
    cli = stack.rescue("ingest", str(missing), "--data-root", str(stack.root / "terminal"))
    assert cli.returncode == 2 and cli.stdout.strip() == f"manifest error: batch folder {missing} does not exist", \
        cli.stdout + cli.stderr
    assert "Traceback" not in cli.stdout + cli.stderr


def test_a_refused_release_through_a_worker_is_one_line_and_rc_1_without_a_traceback(stack, tmp_path):
    """A run that ends itself Failed ("Refused") on a worker: Prefect's engine re-raises that state
    and logged it with its own traceback in the run's log; now the told line is all there is."""
    missing = tmp_path / "nowhere.jsonl"
    proc = stack.prefect("deployment", "run", "build-release/default", "--param", "version=1.0.0",
                         "--param", f"source={missing}", "--param", f"data_root={stack.root / 'terminal'}", "--watch")
    out = _flat(proc)
    line = f"release 1.0.0 refused: input file not found: {missing}"
    assert proc.returncode == 1, out[-3000:]
    assert "'Refused'" in out and _says(proc, line), out[-3000:]
    logs = _logs(stack, _run_id(proc))
    assert [msg for level, msg in logs if level >= 40] == [line], logs
    assert not [msg for _, msg in logs if "Traceback" in msg], logs
