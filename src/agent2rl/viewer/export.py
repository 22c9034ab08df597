"""``agent2rl export``: a run's trajectory in Harbor's Agent Trajectory Interchange Format.

ATIF (``ATIF-v1.4``, https://harborframework.com/docs/trajectory-format) is a documented,
versioned JSON format that Harbor and other tools validate, view and train on. One file per
run, ``<run_id>.trajectory.json``, built from the run directory only (read-only):

- ``steps``: the system prompt (a ``system`` step), the user's messages (``user`` steps),
  each LLM answer the metering proxy relayed (an ``agent`` step: its text, reasoning, tool
  calls, the model, ``metrics`` with prompt/completion/cached tokens and cost) with the
  results of its tool calls, as the next request carried them, as its ``observation``;
  failed LLM requests and the run's submissions are ``system`` steps in time order (a
  submission's step has ``extra.submission``: id, path, status, score, snapshot).
- ``final_metrics``: token and cost totals over all LLM requests.
- ``extra.agent2rl``: this export's own format name and version (:data:`EXPORT_VERSION`),
  the run (task, agent, model, budget, status, times), the baseline score and every
  submission and code snapshot, so a tool that reads only ATIF still finds the scores.

The LLM steps come from ``record/transcript.jsonl`` (see
:mod:`agent2rl.metering.transcript`); a run recorded before transcripts existed exports its
submissions and metadata with no LLM steps (``notes`` says so). Only JSON conversations of a
known shape (OpenAI Chat Completions and Responses, Anthropic Messages, Gemini) are mapped;
an item of another shape is kept as text.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agent2rl.errors import UserError
from agent2rl.files import write_json_atomic
from agent2rl.metering.transcript import full_requests, read_transcript
from agent2rl.rundir import RunPaths
from agent2rl.study.state import STATE_DB
from agent2rl.viewer.data import (
    RunView,
    answer_parts,
    request_items,
    response_text,
    study_run_dirs,
    tool_calls_of,
)

ATIF_VERSION = "ATIF-v1.4"
EXPORT_FORMAT = "agent2rl-trajectory"
#: the version of what this exporter puts in ``extra.agent2rl`` (and of its mapping)
EXPORT_VERSION = 1


def _iso(t: Any) -> str | None:
    if not isinstance(t, int | float):
        return None
    return _dt.datetime.fromtimestamp(t, _dt.UTC).isoformat().replace("+00:00", "Z")


def _args(value: Any) -> dict[str, Any]:
    """Tool-call arguments as the object ATIF requires (a JSON string is parsed; anything
    that is not an object is wrapped as ``{"input": ...}``)."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            return {"input": value}
    return value if isinstance(value, dict) else {"input": value}


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(t for v in value if (t := _text(v)))
    if isinstance(value, dict):
        for key in ("text", "content", "output", "result"):
            if key in value:
                return _text(value[key])
        return json.dumps(value)
    return "" if value is None else json.dumps(value)


def _system_prompt(body: dict[str, Any]) -> str | None:
    if "system" in body:
        return _text(body["system"])
    if isinstance(body.get("instructions"), str):
        return body["instructions"]
    if isinstance(body.get("systemInstruction"), dict):
        return _text(body["systemInstruction"].get("parts"))
    for m in body.get("messages") or []:
        if isinstance(m, dict) and m.get("role") in ("system", "developer"):
            return _text(m.get("content"))
    return None


def _split_items(items: Iterable[Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """New conversation items -> (user messages, tool results). The assistant's own turns
    (echoes of earlier answers) and system messages are left out."""
    users: list[str] = []
    results: list[dict[str, Any]] = []

    def result(call_id: Any, content: str) -> None:
        results.append({"source_call_id": call_id, "content": content})

    for item in items:
        if not isinstance(item, dict):
            continue
        role, kind = item.get("role"), item.get("type")
        echo = kind in ("function_call", "reasoning", "message") and role != "user"
        if role in ("assistant", "model", "system", "developer") or echo:
            continue
        if role == "tool":
            result(item.get("tool_call_id"), _text(item.get("content")))
            continue
        if kind == "function_call_output":
            result(item.get("call_id"), _text(item.get("output")))
            continue
        content = item.get("content", item.get("parts"))
        if isinstance(content, list):
            texts = []
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    result(block.get("tool_use_id"), _text(block.get("content")))
                elif isinstance(block, dict) and "functionResponse" in block:
                    fr = block["functionResponse"]
                    result(fr.get("id") or fr.get("name"), json.dumps(fr.get("response")))
                elif t := _text(block):
                    texts.append(t)
            if texts:
                users.append("\n".join(texts))
        elif content is not None and (t := _text(content)):
            users.append(t)
    return users, results


def _reasoning(response: Any) -> str | None:
    parts = [v for kind, v in answer_parts(response) if kind == "reasoning" and isinstance(v, str)]
    return "\n".join(p for p in parts if p) or None


#: the run.json fields ``extra.agent2rl.run`` carries
_RUN_FIELDS = (
    "run_id", "task", "task_version", "level", "agent", "model", "driver", "mode", "budget_s",
    "seed", "status", "start", "deadline", "ended_at", "eval_hash",
)  # fmt: skip

#: (time, order, step): steps sort by time, then by the order they were made in
_Timed = tuple[float, int, dict[str, Any]]


def _failed_step(line: dict[str, Any]) -> dict[str, Any]:
    """A failed LLM request as a ``system`` step."""
    return {
        "source": "system",
        "message": f"LLM request failed: {line.get('error') or line.get('status')}",
        "extra": {
            "llm_request": {k: line.get(k) for k in ("seq", "api", "endpoint", "model", "status")}
        },
    }


def _agent_step(line: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """One LLM answer as an ``agent`` step: text, reasoning, tool calls, token metrics."""
    metrics: dict[str, Any] = {
        "prompt_tokens": line.get("input_tokens") or 0,
        "completion_tokens": line.get("output_tokens") or 0,
        "cached_tokens": line.get("cached_tokens") or 0,
    }
    if line.get("cost_usd") is not None:
        metrics["cost_usd"] = line["cost_usd"]
    metrics["extra"] = {
        "latency_s": line.get("latency_s"),
        "cache_write_tokens": line.get("cache_write_tokens") or 0,
        "transcript_seq": line.get("seq"),
        "api": line.get("api"),
        "endpoint": line.get("endpoint"),
    }
    step: dict[str, Any] = {
        "source": "agent",
        "model_name": line.get("model"),
        "message": response_text(response),
        "metrics": metrics,
    }
    if reasoning := _reasoning(response):
        step["reasoning_content"] = reasoning
    if calls := tool_calls_of(response):
        step["tool_calls"] = [
            {
                "tool_call_id": str(c.get("id") or f"call_{line.get('seq')}_{i}"),
                "function_name": str(c.get("name")),
                "arguments": _args(c.get("arguments")),
            }
            for i, c in enumerate(calls)
        ]
    return step


def _llm_steps(lines: list[dict[str, Any]], bodies: list[Any]) -> list[_Timed]:
    """The steps of the LLM transcript: the system prompt once, the user's messages, each
    answer (an agent step, timed at its end) with the tool results the next request carried
    as its observation, and failed requests."""
    timed: list[_Timed] = []
    seen_system = False
    last_agent: dict[str, Any] | None = None
    order = 0
    for line, body in zip(lines, bodies, strict=True):
        t = line.get("time") or 0.0
        order += 1
        if line.get("status") != 200 or line.get("error"):
            timed.append((t, order, _failed_step(line)))
            continue
        response = line.get("response")
        if not isinstance(body, dict) or not isinstance(response, dict):
            continue
        if not seen_system and (sp := _system_prompt(body)):
            timed.append((t, order, {"source": "system", "message": sp}))
            seen_system = True
        users, results = _split_items(request_items(line.get("request")))
        if results and last_agent is not None:
            last_agent.setdefault("observation", {"results": []})["results"].extend(results)
        for u in users:
            order += 1
            timed.append((t, order, {"source": "user", "message": u}))
        order += 1
        last_agent = _agent_step(line, response)
        timed.append((t + (line.get("latency_s") or 0.0), order, last_agent))
    return timed


def _submission_steps(subs: list[dict[str, Any]], order: int) -> list[_Timed]:
    """Each submission as a ``system`` step (``extra.submission``: its ledger row)."""
    out = []
    for s in subs:
        score = "–" if s["score"] is None else f"{s['score']:.4f}"
        order += 1
        message = f"submission #{s['id']} {s['path']}: {s['status']}, score {score}"
        step = {
            "source": "system",
            "message": message + (f" ({s['error']})" if s["error"] else ""),
            "extra": {"submission": s},
        }
        out.append((s["submitted_at"], order, step))
    return out


def _final_metrics(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Token and cost totals over the agent steps (the answered LLM requests)."""
    metrics = [s["metrics"] for s in steps if s["source"] == "agent"]
    tokens = ("prompt_tokens", "completion_tokens", "cached_tokens")
    return {
        **{f"total_{k}": sum(m[k] for m in metrics) for k in tokens},
        "total_cost_usd": round(sum(m.get("cost_usd") or 0.0 for m in metrics), 6),
        "total_steps": len(steps),
    }


def run_trajectory(run_dir: Path) -> dict[str, Any]:
    """The ATIF trajectory of one run directory (see the module docstring), read through
    its :class:`~agent2rl.run_record.RunRecord`. Raises UserError for a directory without a
    readable ``run.json``."""
    from agent2rl import __version__

    view = RunView(Path(run_dir))
    info = view.info()
    if not info:
        raise UserError(f"{run_dir} is not a run directory (no readable run.json)")
    lines = read_transcript(view.record.paths.transcript)
    bodies = full_requests(lines)
    led = view.ledger()
    timed = _llm_steps(lines, bodies)
    # submissions after the LLM steps of the same time
    timed += _submission_steps(led["submissions"], max((o for _, o, _ in timed), default=0))
    timed.sort(key=lambda x: (x[0], x[1]))
    steps = [
        {"step_id": i, "timestamp": _iso(t), **{k: v for k, v in step.items() if v is not None}}
        for i, (t, _, step) in enumerate(timed, start=1)
    ]
    models = Counter(
        s["model_name"] for s in steps if s["source"] == "agent" and s.get("model_name")
    )
    model = max(models, key=lambda m: models[m]) if models else info.get("driver")
    agent = {"name": str(info.get("agent")), "version": f"agent2rl-{__version__}"}
    trajectory: dict[str, Any] = {
        "schema_version": ATIF_VERSION,
        "session_id": info.get("run_id") or Path(run_dir).name,
        "agent": {**agent, **({"model_name": model} if model else {})},
        "steps": steps,
        "final_metrics": _final_metrics(steps),
        "extra": {
            "agent2rl": {
                "format": EXPORT_FORMAT,
                "version": EXPORT_VERSION,
                "run": {k: info.get(k) for k in _RUN_FIELDS},
                "baseline": led["baseline"],
                "best": led["best"],
                "submissions": led["submissions"],
                "snapshots": [
                    {"sha": s["sha"], "t": s["t"], "message": s["message"]}
                    for s in view.snapshots()
                ],
            }
        },
    }
    if not lines:
        trajectory["notes"] = "no LLM transcript in this run (record/transcript.jsonl is missing)"
    return trajectory


def export_dirs(path: Path) -> list[Path]:
    """The run directories ``path`` stands for: itself (a run), a study's runs (its slots'
    run directories), or every run directly under a runs directory. Raises UserError when it
    holds none."""
    path = Path(path).expanduser()
    if RunPaths(path).run_json.is_file():
        return [path]
    if (path / STATE_DB).is_file():
        return study_run_dirs(path)
    dirs = sorted(p.parent for p in path.glob("*/run.json"))
    if not dirs:
        raise UserError(
            f"{path} holds no run: pass a run directory, a study directory or a runs directory"
        )
    return dirs


def export_trajectories(path: Path, out: Path) -> list[Path]:
    """Write one ``<run_id>.trajectory.json`` per run of ``path`` into ``out`` (created),
    and ``index.json`` listing them with this export's format and version. Returns the
    trajectory files."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for d in export_dirs(path):
        traj = run_trajectory(d)
        f = out / f"{traj['session_id']}.trajectory.json"
        write_json_atomic(f, traj)
        written.append(f)
    index = {"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "schema_version": ATIF_VERSION}
    write_json_atomic(out / "index.json", index | {"trajectories": [f.name for f in written]})
    return written
