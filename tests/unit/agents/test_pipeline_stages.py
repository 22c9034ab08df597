"""The paper pipelines' stage runner (issue #39 item 5): per stage the agent's CLI is capped at
N steps counted in its JSON events, then the runner itself runs ``code/train.sh`` with a
timeout, submits the model folder to the grading API and feeds the outcome into the next
stage's prompt. Everything runs for real: the runner as a subprocess, a stand-in CLI printing
the real CLIs' event shapes, train.sh under bash, and an HTTP server on loopback speaking the
grading API's ``POST /submit``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agent2rl.agents import get_agent
from agent2rl.agents.logs import parse_log
from agent2rl.agents.pipelines.stages import StepCounter

STAGES = Path(__file__).parents[3] / "src" / "agent2rl" / "agents" / "pipelines" / "stages.py"
FIXTURES = Path(__file__).parents[2] / "support" / "fixtures" / "agent_logs"
TOKEN = "run-token-123"

# A stand-in CLI: records its pid, a child's pid (a leftover in its process group) and the
# stage prompt, prints a Rich log record (no step) and `steps` steps in the real CLIs' event
# shapes (see agents/logs/openhands.py and opencode.py), then lingers for FAKE_LINGER s.
FAKE_CLI = """
import json, os, subprocess, sys, time
log, fmt, steps, prompt_file, spawn = sys.argv[1:6]
child = subprocess.Popen(["sleep", "300"]).pid if spawn == "1" else None
with open(log, "a") as fh:
    record = {"pid": os.getpid(), "child": child, "text": open(prompt_file).read()}
    fh.write(json.dumps(record) + "\\n")
print("[11/25/26 17:37:43] ERROR    Git command failed   utils.py:48", flush=True)
for k in range(int(steps)):
    if fmt == "openhands":
        print(json.dumps({"kind": "ActionEvent", "tool_name": "terminal", "tool_call_id": f"c{k}"}))
        print(json.dumps({"kind": "ObservationEvent", "tool_name": "terminal",
                          "tool_call_id": f"c{k}", "observation": {"content": []}}))
    else:
        print(json.dumps({"type": "step_start", "part": {}}))
        print(json.dumps({"type": "tool_use", "part": {"tool": "bash", "callID": f"c{k}",
                          "state": {"status": "completed", "output": "ok"}}}))
        print(json.dumps({"type": "step_finish", "part": {"reason": "tool-calls"}}))
    sys.stdout.flush()
    time.sleep(0.05)
time.sleep(float(os.environ.get("FAKE_LINGER", "0")))
"""


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace with code/ and output/, the prompt file in its root and the fake CLI."""
    ws = tmp_path / "workspace"
    (ws / "code").mkdir(parents=True)
    (ws / "output").mkdir()
    (ws / "prompt.md").write_text("Train the model.\n")
    (tmp_path / "fake_cli.py").write_text(FAKE_CLI)
    return ws


def _run(
    ws: Path,
    stages: int,
    flags: list[str],
    fmt: str = "openhands",
    steps: int = 0,
    spawn: bool = False,
    env: dict[str, str] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """The runner in ``ws`` over the fake CLI (its calls in ws/../calls.jsonl)."""
    fake, log = ws.parent / "fake_cli.py", ws.parent / "calls.jsonl"
    cli = [sys.executable, str(fake), str(log), fmt, str(steps), "@STAGE_PROMPT_FILE@"]
    return subprocess.run(
        [sys.executable, str(STAGES), "--stages", str(stages), *flags,
         "--prompt-file", str(ws / "prompt.md"), "--", *cli, "1" if spawn else "0"],
        cwd=ws, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def _calls(ws: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (ws.parent / "calls.jsonl").read_text().splitlines()]


def _gone(pid: int) -> bool:
    """No such process, or only its zombie left."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _pids(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()] if path.exists() else []


# -- the step cap ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("log", "fmt", "steps"), [("openhands", "openhands-jsonl", 4), ("opencode", "opencode-json", 3)]
)
def test_steps_are_the_tool_calls_the_log_parsers_read(log: str, fmt: str, steps: int) -> None:
    # the real CLIs' logs: a step is each tool call the parser reads (OpenHands' finish
    # tool, the parser's "final", is an action too)
    text = (FIXTURES / f"{log}.jsonl").read_text()
    counter = StepCounter(cap=100)
    for line in text.encode().splitlines(keepends=True):
        assert not counter.feed(line)
    calls = [e for e in parse_log(text, fmt) if e.kind == "tool_call"]
    finals = [e for e in parse_log(text, fmt) if e.kind == "final" and log == "openhands"]
    assert counter.steps == steps == len(calls) + len(finals)
    assert not counter.pending  # every OpenHands action got its observation


def test_openhands_cap_waits_for_the_last_actions_observation() -> None:
    counter = StepCounter(cap=2)
    action = {"kind": "ActionEvent", "tool_call_id": "a"}
    assert not counter.feed(json.dumps(action).encode())
    assert not counter.feed(json.dumps({**action, "tool_call_id": "b"}).encode())
    # the second step has started, not finished: it may run to its end
    assert not counter.feed(b'{"kind": "ObservationEvent", "tool_call_id": "a"}\n')
    assert counter.feed(b'{"kind": "ObservationEvent", "tool_call_id": "b"}\n')
    # a third action asked for in the same turn ends the stage at once
    counter = StepCounter(cap=1)
    counter.feed(json.dumps(action).encode())
    assert counter.feed(json.dumps({**action, "tool_call_id": "b"}).encode())


@pytest.mark.parametrize("fmt", ["openhands", "opencode"])
def test_a_stage_is_ended_at_the_step_cap_with_its_process_group(ws: Path, fmt: str) -> None:
    # 10 steps then 30 s of lingering: only the cap ends a stage within the test's timeout
    out = _run(ws, 2, ["--max-steps", "3"], fmt, steps=10, spawn=True, env={"FAKE_LINGER": "30"})
    assert out.returncode == 0, out.stderr
    step = '"kind": "ActionEvent"' if fmt == "openhands" else '"type": "tool_use"'
    lines = out.stdout.splitlines()
    # passed through unchanged, log records included; 3 steps a stage, counted per stage
    assert sum(step in line for line in lines) == 6
    assert sum(line.startswith("[11/25/26 17:37:43] ERROR") for line in lines) == 2
    assert out.stderr.count("ended at the cap of 3 steps") == 2
    assert "stage 2 exited -15" in out.stderr  # ended by SIGTERM, not exited by itself
    calls = _calls(ws)
    assert len(calls) == 2 and "capped at 3 agent steps" in calls[0]["text"]
    for call in calls:  # the CLI and what it left running in its group are gone
        assert _gone(call["pid"]) and _gone(call["child"])
    if fmt == "openhands":  # the third step ran to its end: its observation was passed on
        observations = [line for line in lines if '"kind": "ObservationEvent"' in line]
        assert len(observations) == 6


def test_a_stage_below_the_cap_runs_to_its_end(ws: Path) -> None:
    out = _run(ws, 1, ["--max-steps", "25"], "opencode", steps=4)
    assert out.returncode == 0
    assert sum('"tool_use"' in line for line in out.stdout.splitlines()) == 4
    assert "stage 1: 4 steps" in out.stderr and "stage 1 exited 0" in out.stderr


# -- training, submission, feedback ---------------------------------------------------------


class GradingStandIn:
    """``POST /submit`` as the grading API speaks it (agent2rl.grading.app): bearer token,
    ``{"model_path": ...}`` in, the graded submission's view out, or a 4xx with
    ``{"error": ...}``. ``answers`` are given in turn; ``requests`` records what came."""

    def __init__(self, answers: list[tuple[int, dict[str, Any]]]) -> None:
        self.answers, self.requests = list(answers), []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stand_in.requests.append(
                    {"path": self.path, "auth": self.headers["Authorization"], "body": body}
                )
                status, answer = (
                    stand_in.answers.pop(0)
                    if self.headers["Authorization"] == f"Bearer {TOKEN}"
                    else (401, {"error": "missing or wrong token"})
                )
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> GradingStandIn:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _graded(sub_id: int, path: str, score: float) -> dict[str, Any]:
    return {
        "submission_id": sub_id, "path": path, "status": "graded", "score": score,
        "improvement": round(score - 0.5, 4), "error": None, "failure_kind": None,
        "baseline": 0.5, "best_score": score, "best_submission_id": sub_id,
        "submissions": sub_id, "remaining_s": 3600.0, "split": "test",
    }  # fmt: skip


TRAIN_SH = """#!/bin/bash
# saves a model folder in $1 (the pipeline's argument) and says so in its log
set -e
echo "training into $1 (STAGE_MODEL_DIR=$STAGE_MODEL_DIR)"
mkdir -p "$1" && echo '{}' > "$1/config.json"
echo "epoch 1 loss 0.25"
"""


@pytest.fixture
def grading_env() -> Iterator[tuple[GradingStandIn, dict[str, str]]]:
    answers = [
        (200, _graded(1, "output/stage-1", 0.625)),
        (400, {"error": "model_path 'output/stage-2' has no *.safetensors weights: save ..."}),
        (200, _graded(3, "output/stage-3", 0.75)),
    ]
    with GradingStandIn(answers) as server:
        yield server, {"GRADING_SERVER_URL": server.url, "GRADING_TOKEN": TOKEN}


def test_the_runner_trains_submits_and_feeds_the_answer_back(
    ws: Path, grading_env: tuple[GradingStandIn, dict[str, str]]
) -> None:
    server, env = grading_env
    (ws / "code" / "train.sh").write_text(TRAIN_SH)
    out = _run(ws, 3, ["--train-timeout", "60"], env=env)
    assert out.returncode == 0, out.stderr
    # each stage's folder was submitted, with the run's token, as the workspace documents
    bodies = [r["body"] for r in server.requests]
    assert bodies == [{"model_path": f"output/stage-{i}"} for i in (1, 2, 3)]
    assert all(r["path"] == "/submit" and r["auth"] == f"Bearer {TOKEN}" for r in server.requests)
    assert (ws / "output" / "stage-1" / "config.json").exists()
    texts = [c["text"] for c in _calls(ws)]
    assert "bash code/train.sh output/stage-1" in texts[0] and "60 seconds" in texts[0]
    assert "Feedback from stage" not in texts[0]
    # stage 2 is told how stage 1's training went and what the grader answered
    assert "## Feedback from stage 1" in texts[1]
    assert "exited 0" in texts[1] and "epoch 1 loss 0.25" in texts[1]
    assert "STAGE_MODEL_DIR=output/stage-1" in texts[1]
    assert "score 0.625 (baseline 0.5, improvement 0.125, best so far 0.625)" in texts[1]
    assert '"submission_id": 1' in texts[1]
    # stage 3: the grader's refusal, its error verbatim
    assert "refused by the grading service (HTTP 400)" in texts[2]
    assert "has no *.safetensors weights" in texts[2] and "score 0.625" not in texts[2]
    # the feedback file holds the last stage's outcome; the log is in the workspace
    last = (ws / ".stage-feedback.md").read_text()
    assert "score 0.75" in last and "Feedback" not in last
    assert "epoch 1 loss" in (ws / "stage-logs" / "train-3.log").read_text()
    # stdout stays the CLI's: train.sh's output is not in the agent log
    assert "epoch 1 loss" not in out.stdout


def test_a_stage_without_train_sh_is_told_so_and_nothing_is_submitted(
    ws: Path, grading_env: tuple[GradingStandIn, dict[str, str]]
) -> None:
    server, env = grading_env
    out = _run(ws, 2, ["--train-timeout", "60"], env=env)
    assert out.returncode == 0, out.stderr
    assert server.requests == []
    feedback = _calls(ws)[1]["text"].split("## Feedback from stage 1", 1)[1]
    assert "Stage 1 left no `code/train.sh`: nothing was trained or submitted" in feedback


def test_a_train_sh_that_leaves_no_model_is_not_submitted(
    ws: Path, grading_env: tuple[GradingStandIn, dict[str, str]]
) -> None:
    server, env = grading_env
    (ws / "code" / "train.sh").write_text("echo 'CUDA out of memory' >&2\nexit 3\n")
    _run(ws, 2, ["--train-timeout", "60"], env=env)
    assert server.requests == []
    feedback = _calls(ws)[1]["text"]
    assert "exited 3" in feedback and "CUDA out of memory" in feedback
    assert "left no folder `output/stage-1`: nothing was submitted" in feedback


def test_train_sh_is_killed_at_its_timeout_with_its_group(ws: Path) -> None:
    pids = ws.parent / "train.pids"
    (ws / "code" / "train.sh").write_text(
        f"echo $$ >> {pids}\nsleep 300 &\necho $! >> {pids}\necho started\nwait\n"
    )
    # no grading service: the timeout, not a submission, is what is tested
    env = {"GRADING_SERVER_URL": "", "GRADING_TOKEN": ""}
    out = _run(ws, 2, ["--train-timeout", "2"], env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert len(_pids(pids)) == 4  # both stages trained
    assert all(_gone(pid) for pid in _pids(pids))  # bash and its background sleep
    feedback = _calls(ws)[1]["text"]
    assert "was killed at the 2 s timeout" in feedback and "started" in feedback
    assert "nothing was submitted" in feedback


def test_without_the_flags_a_stage_is_the_bare_cli(ws: Path) -> None:
    (ws / "code" / "train.sh").write_text("touch trained\n")
    out = _run(ws, 2, [], "opencode", steps=30)
    assert out.returncode == 0
    assert sum('"tool_use"' in line for line in out.stdout.splitlines()) == 60
    assert not (ws / "trained").exists() and not (ws / ".stage-feedback.md").exists()
    text = _calls(ws)[1]["text"]
    assert "capped" not in text and "train.sh" not in text and "Feedback" not in text


def test_the_paper_specs_pass_the_references_caps_and_timeouts() -> None:
    for name, steps, timeout in (("openhands-paper", 20, 36000), ("opencode-paper", 25, 7200)):
        command = get_agent(name).command
        head = command[: command.index("--")]
        assert head[head.index("--max-steps") + 1] == str(steps)
        assert head[head.index("--train-timeout") + 1] == str(timeout)
