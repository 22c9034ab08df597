"""Run a coding-agent CLI as a fixed-stage pipeline: the same CLI started N times in turn.

The paper's reference implementation runs OpenHands for 30 iterations and OpenCode for 5,
each a fresh session that continues the previous ones' work in the same workspace (its
instructions ask the agent to keep ``summary.md``). Per iteration the agent generates code,
capped at 20 (OpenHands) / 25 (OpenCode) agent steps; then the pipeline, not the agent,
trains (timeout 36,000 / 7,200 s) and evaluates, and feeds the outcome into the next
iteration. This script is that loop, as the ``openhands-paper`` and ``opencode-paper`` agent
specs run it::

    python stages.py --stages 30 --max-steps 20 --train-timeout 36000 \\
        --prompt-file prompt.md -- openhands --json --file @STAGE_PROMPT_FILE@

Each stage gets the run's prompt with a note saying which stage it is and to read and keep
``summary.md``; ``@STAGE_PROMPT_FILE@`` in the command becomes a file holding that text and
``@STAGE_PROMPT@`` the text itself. Stages run one after another whatever the previous one
exited with (a stage that crashes is the agent's failure, not the pipeline's), except that a
command that cannot be started (not installed: exit 127) ends the pipeline at once.

``--max-steps N``: a stage's CLI is ended once its agent has taken N steps, counted per
stage (:func:`run_capped`). ``--train-timeout S``: after the agent's part the pipeline runs
the workspace's ``code/train.sh`` for at most S seconds, submits the model it saved and
writes the outcome to ``.stage-feedback.md``, which the next stage's prompt includes
(:func:`training_feedback`). Without either flag a stage is the bare CLI.

The harness's deadline kills the agent's whole tree (its process group and every process
carrying its marker variable, which the CLI's and train.sh's own groups inherit), so a
pipeline that runs out of time ends mid-stage, as a stock CLI does; on SIGTERM this script
also ends the group it is running. Standard library only: it runs under the harness's Python
inside the sandbox. Its own messages go to stderr; stdout is the CLI's, for the log parser.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

STAGE_NOTE = """

---
Stage {i} of {n} of a fixed-stage pipeline: each stage is a new session in the same
workspace. Read summary.md first if it exists (what earlier stages did, their scores, what
to try next), continue from there, and before you stop update summary.md for the next stage.
"""

STEPS_NOTE = """
This stage's session is capped at {steps} agent steps (tool calls): it is ended once that
many are done, so update summary.md before you run out.
"""

TRAIN_NOTE = """
In this pipeline the training and the submission are the pipeline's, not yours. Your job in
this stage is the code: write `code/train.sh` (bash, run from the workspace root). After
your session ends, the pipeline runs `bash code/train.sh {model_dir}` with a limit of
{timeout} seconds (then it is killed); it must train and save the full model (Hugging Face
format, safetensors) in the folder given as its first argument (also `$STAGE_MODEL_DIR`),
here `{model_dir}`. The pipeline then submits that folder to the grading service and puts
the outcome (the training's exit status and last log lines, the grading answer) in the next
stage's prompt. Check that train.sh runs (a quick, small try), but leave the full training
and the submission to the pipeline.
"""

FEEDBACK_HEADER = "\n## Feedback from stage {i} (written by the pipeline)\n\n"

#: the training entry point the pipeline runs, relative to the workspace
TRAIN_SCRIPT = "code/train.sh"
#: where the pipeline puts stage i's training log, relative to the workspace
TRAIN_LOG = "stage-logs/train-{i}.log"
#: the folder stage i's train.sh saves its model in, relative to the workspace (a folder of
#: its own per stage: a graded one is never overwritten)
MODEL_DIR = "output/stage-{i}"
#: where the pipeline writes the outcome of the last stage, next to the prompt file
FEEDBACK_FILE = ".stage-feedback.md"
#: how long a process group gets between SIGTERM and SIGKILL
STOP_GRACE_S = 5.0
#: how long the output reader may run on after the CLI ended (a process that left the group
#: may still hold the pipe; its output is not waited for)
DRAIN_S = 5.0
#: the training log lines the feedback quotes
LOG_TAIL_LINES = 40
#: how long a submission may take (it blocks until graded; the workspace's example waits
#: as long)
SUBMIT_TIMEOUT_S = 3600.0

#: the CLI or train.sh now running, ended with the script on SIGTERM
_running: subprocess.Popen[bytes] | None = None


def stage_prompt(
    prompt: str, i: int, n: int, max_steps: int | None, train_timeout: float | None, feedback: str
) -> str:
    """The prompt stage ``i`` (1-based) of ``n`` gets: the run's prompt, the stage note, the
    step cap's note when there is a cap, the training note when the pipeline trains, and
    ``feedback`` (the previous stage's outcome; none for the first stage)."""
    text = prompt.rstrip("\n") + STAGE_NOTE.format(i=i, n=n)
    if max_steps is not None:
        text += STEPS_NOTE.format(steps=max_steps)
    if train_timeout is not None:
        text += TRAIN_NOTE.format(model_dir=MODEL_DIR.format(i=i), timeout=f"{train_timeout:g}")
    if feedback:
        text += FEEDBACK_HEADER.format(i=i - 1) + feedback.rstrip("\n") + "\n"
    return text


@dataclass
class StepCounter:
    """Counts the agent's steps in the CLI's JSON events and says when ``cap`` are done.

    A step is one action (tool call) of the agent, as agent2rl's log parsers read them:
    OpenHands ``--json`` (``openhands-jsonl``): an ``{"kind": "ActionEvent", ...}``, which
    comes before the action runs and is done when an ``ObservationEvent``,
    ``UserRejectObservation`` or ``AgentErrorEvent`` with its ``tool_call_id`` arrives;
    OpenCode ``run --format json`` (``opencode-json``): a ``{"type": "tool_use", ...}``,
    printed when the tool has finished. The cap is reached when ``cap`` steps are done, so
    that the last one is not cut off mid-action; an action started beyond the cap (the
    model may ask for several at once) ends the stage at once. A line that is not a JSON
    object (a log record, a banner) is no step.
    """

    cap: int
    steps: int = 0
    pending: set[str] = field(default_factory=set)

    def feed(self, line: bytes) -> bool:
        """Count ``line``'s step, if any; True once the stage should end."""
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            return False
        if not isinstance(event, dict):
            return False
        if event.get("type") == "tool_use":
            self.steps += 1
        elif event.get("kind") == "ActionEvent":
            self.steps += 1
            self.pending.add(str(event.get("tool_call_id", "")))
        elif event.get("kind") in ("ObservationEvent", "UserRejectObservation", "AgentErrorEvent"):
            self.pending.discard(str(event.get("tool_call_id", "")))
        return self.steps > self.cap or (self.steps == self.cap and not self.pending)


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs, read from /proc (Linux, and the
    sandbox mounts its own). Zombies do not count: an orphan's zombie waits for a reaper that
    may never come (a container's pid 1 that does not reap) and would keep ``kill(-pgid, 0)``
    succeeding."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    """End the process group ``proc`` leads (started with ``start_new_session``): SIGTERM,
    then SIGKILL to what is left after ``grace_s``. Safe when ``proc`` or the whole group
    already exited; returns once ``proc`` is reaped and the group is empty (or, if a member
    cannot be killed, after the SIGKILL)."""
    pgid = proc.pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    end = time.monotonic() + grace_s
    while time.monotonic() < end:
        proc.poll()  # a leader left unreaped would keep the group alive
        if proc.returncode is not None and not _group_alive(pgid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    proc.wait()
    end = time.monotonic() + grace_s
    while _group_alive(pgid) and time.monotonic() < end:  # members reaped by their parent
        time.sleep(0.05)


def _pass_through(pipe: IO[bytes], counter: StepCounter | None, capped: threading.Event) -> None:
    """Copy the CLI's stdout to ours line by line, counting steps; set ``capped`` at the cap."""
    out = sys.stdout.buffer
    for line in pipe:
        out.write(line)
        out.flush()
        if counter is not None and not capped.is_set() and counter.feed(line):
            capped.set()


def run_capped(argv: list[str], max_steps: int) -> tuple[int, int, bool]:
    """Run the CLI ``argv`` in its own process group until it exits or its agent has taken
    ``max_steps`` steps (then the group is ended). Returns (exit status, steps, capped);
    the status of an ended CLI is the signal's (negative). Raises FileNotFoundError when
    ``argv[0]`` cannot be found. Whatever the CLI left running in its group when it exited
    is ended too: the stage is over."""
    global _running
    counter = StepCounter(max_steps)
    capped = threading.Event()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, start_new_session=True)
    _running = proc
    assert proc.stdout is not None
    reader = threading.Thread(target=_pass_through, args=(proc.stdout, counter, capped))
    reader.daemon = True  # a process that left the group may hold the pipe open for ever
    reader.start()
    try:
        while proc.poll() is None and not capped.wait(0.1):
            pass
        stop_group(proc)
        reader.join(DRAIN_S)
    finally:
        _running = None
    return proc.returncode, counter.steps, capped.is_set()


@dataclass
class Training:
    """What running train.sh came to."""

    status: int | None  # its exit status; None when it was killed at the timeout
    seconds: float
    log_tail: str


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of ``path`` (at most the last 64 KiB read), '' if missing."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 65536))
            data = fh.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def run_training(workdir: Path, model_dir: str, timeout_s: float, log_path: Path) -> Training:
    """Run ``bash code/train.sh model_dir`` in ``workdir`` (``$STAGE_MODEL_DIR`` set too) in its
    own process group, output to ``log_path``, ended after ``timeout_s`` seconds; whatever
    it left running when it exited is ended as well (the training stage is over)."""
    global _running
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            ["bash", TRAIN_SCRIPT, model_dir],
            cwd=workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "STAGE_MODEL_DIR": model_dir},
            start_new_session=True,
        )
        _running = proc
        try:
            status: int | None = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            status = None
        finally:
            stop_group(proc)
            _running = None
    return Training(status, time.monotonic() - start, tail(log_path))


def submit(model_dir: str, url: str, token: str, timeout_s: float = SUBMIT_TIMEOUT_S) -> str:
    """Submit ``model_dir`` to the grading service at ``url`` as the workspace documents it
    (``POST /submit`` with ``{"model_path": ...}`` and the bearer token); returns one line
    saying the answer: the score with the baseline, improvement and best when graded, the
    service's ``error`` when it refused or the evaluation failed, the reason when it could
    not be reached. The whole answer follows as JSON (it is what the agent would have been
    told had it submitted itself)."""
    req = urllib.request.Request(
        url.rstrip("/") + "/submit",
        data=json.dumps({"model_path": model_dir}).encode(),
        headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            answer = json.load(resp)
    except urllib.error.HTTPError as err:
        body = err.read().decode("utf-8", "replace")
        try:
            message = json.loads(body).get("error", body)
        except (ValueError, AttributeError):
            message = body
        return f"refused by the grading service (HTTP {err.code}): {message}"
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        return f"the grading service could not be reached: {reason}"
    if not isinstance(answer, dict):
        return f"the grading service answered: {json.dumps(answer)}"
    if answer.get("score") is None:
        head = f"not graded (status {answer.get('status')}): {answer.get('error')}"
    else:
        head = (
            f"score {answer['score']} (baseline {answer.get('baseline')}, improvement "
            f"{answer.get('improvement')}, best so far {answer.get('best_score')})"
        )
    return f"{head}\nThe grading service's answer: {json.dumps(answer)}"


def training_feedback(i: int, workdir: Path, timeout_s: float, env: dict[str, str]) -> str:
    """Stage ``i``'s training and grading, run by the pipeline in ``workdir``; returns the
    feedback text for the next stage. No train.sh: nothing is run or submitted, and the
    feedback says so; a train.sh that left no model folder: nothing is submitted; a folder
    is submitted whatever train.sh exited with (a timed-out training may have saved one).
    Without ``GRADING_SERVER_URL``/``GRADING_TOKEN`` in ``env`` nothing is submitted."""
    model_dir = MODEL_DIR.format(i=i)
    if not (workdir / TRAIN_SCRIPT).is_file():
        return (
            f"Stage {i} left no `{TRAIN_SCRIPT}`: nothing was trained or submitted. Write it "
            "in this stage (see above).\n"
        )
    log_name = TRAIN_LOG.format(i=i)
    print(f"[stages] stage {i}: bash {TRAIN_SCRIPT} {model_dir}", file=sys.stderr, flush=True)
    run = run_training(workdir, model_dir, timeout_s, workdir / log_name)
    if run.status is None:
        ended = f"was killed at the {timeout_s:g} s timeout"
    else:
        ended = f"exited {run.status} after {run.seconds:.0f} s"
    text = f"Training: `bash {TRAIN_SCRIPT} {model_dir}` {ended}.\n"
    text += f"Last lines of its log (`{log_name}`):\n```\n{run.log_tail}\n```\n"
    url, token = env.get("GRADING_SERVER_URL", ""), env.get("GRADING_TOKEN", "")
    if not (workdir / model_dir).is_dir():
        text += f"Submission: train.sh left no folder `{model_dir}`: nothing was submitted.\n"
    elif not url or not token:
        text += "Submission: no GRADING_SERVER_URL/GRADING_TOKEN: nothing was submitted.\n"
    else:
        print(f"[stages] stage {i}: submitting {model_dir}", file=sys.stderr, flush=True)
        text += f"Submission of `{model_dir}`: {submit(model_dir, url, token)}\n"
    print(f"[stages] stage {i}: training {ended}", file=sys.stderr, flush=True)
    return text


def _fill(cmd: Iterable[str], stage_file: Path, text: str) -> list[str]:
    argv = [a.replace("@STAGE_PROMPT_FILE@", str(stage_file)) for a in cmd]
    return [a.replace("@STAGE_PROMPT@", text) for a in argv]


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    # The harness ends the agent with SIGTERM: the running group goes with this script.
    if _running is not None:
        stop_group(_running, grace_s=1.0)
    sys.exit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    """Run the stages; returns 0 after the last, 127 when the command cannot be started."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--stages", type=int, required=True, help="how many sessions (>= 1)")
    ap.add_argument("--prompt-file", type=Path, required=True)
    ap.add_argument(
        "--max-steps", type=int, help="end each session after this many agent steps (>= 1)"
    )
    ap.add_argument(
        "--train-timeout",
        type=float,
        help=f"after each session run {TRAIN_SCRIPT} with this limit (s), submit, feed back",
    )
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the CLI's argv")
    args = ap.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.stages < 1 or not cmd:
        ap.error("needs --stages >= 1 and a command after --")
    if args.max_steps is not None and args.max_steps < 1:
        ap.error("--max-steps must be >= 1")
    if args.train_timeout is not None and args.train_timeout <= 0:
        ap.error("--train-timeout must be > 0")
    signal.signal(signal.SIGTERM, _on_sigterm)
    prompt = args.prompt_file.read_text(encoding="utf-8")
    stage_file = args.prompt_file.with_name(".stage-prompt.md")
    feedback_file = args.prompt_file.with_name(FEEDBACK_FILE)
    feedback_tmp = feedback_file.with_name(FEEDBACK_FILE + ".tmp")  # replaced atomically
    workdir = Path.cwd()
    feedback = ""
    for i in range(1, args.stages + 1):
        text = stage_prompt(prompt, i, args.stages, args.max_steps, args.train_timeout, feedback)
        stage_file.write_text(text, encoding="utf-8")
        print(f"[stages] stage {i}/{args.stages}: {cmd[0]}", file=sys.stderr, flush=True)
        argv = _fill(cmd, stage_file, text)
        try:
            if args.max_steps is None:
                rc = subprocess.call(argv)
            else:
                rc, steps, capped = run_capped(argv, args.max_steps)
                why = f"ended at the cap of {args.max_steps} steps" if capped else f"{steps} steps"
                print(f"[stages] stage {i}: {why}", file=sys.stderr, flush=True)
        except FileNotFoundError:
            print(f"[stages] {cmd[0]}: not found", file=sys.stderr, flush=True)
            return 127
        print(f"[stages] stage {i} exited {rc}", file=sys.stderr, flush=True)
        if args.train_timeout is not None:
            feedback = training_feedback(i, workdir, args.train_timeout, dict(os.environ))
            feedback_tmp.write_text(feedback, encoding="utf-8")
            os.replace(feedback_tmp, feedback_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
