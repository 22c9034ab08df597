"""Test agent for the viewer: talks to its LLM through the run's metering proxy (three
requests, the second streamed), writes code/train.py, submits a nudged copy of the base
model, waits (at most 120 s) for the test to create code/next, changes train.py and submits
again. So a viewer test sees a conversation, two graded submissions, and a code diff, and
can watch the second submission arrive without a reload."""

import json
import os
import shutil
import time
import urllib.request
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

ws = Path(os.environ["WORKSPACE"])
MODEL = "claude-sonnet-4-5"


def llm(messages: list, stream: bool) -> dict:
    body = {"model": MODEL, "max_tokens": 256, "messages": messages, "stream": stream}
    req = urllib.request.Request(
        os.environ["ANTHROPIC_BASE_URL"].rstrip("/") + "/v1/messages",
        data=json.dumps(body).encode(),
        headers={
            "content-type": "application/json",
            "x-api-key": os.environ["ANTHROPIC_API_KEY"],
            "anthropic-version": "2023-06-01",
        },
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        raw = resp.read().decode()
    if not stream:
        return json.loads(raw)
    blocks: list = []
    for line in raw.splitlines():
        if not line.startswith("data:"):
            continue
        ev = json.loads(line[5:])
        if ev.get("type") == "content_block_start":
            blocks.append(dict(ev["content_block"]))
        elif ev.get("type") == "content_block_delta" and ev["delta"].get("type") == "text_delta":
            blocks[-1]["text"] = blocks[-1].get("text", "") + ev["delta"]["text"]
    return {"content": blocks}


def submit(name: str, scale: float) -> str:
    out = ws / "output" / name
    shutil.copytree(ws / "models" / "base", out)
    weights = load_file(out / "model.safetensors")
    save_file(
        {k: v + scale * torch.randn_like(v) for k, v in weights.items()},
        out / "model.safetensors",
        metadata={"format": "pt"},
    )
    req = urllib.request.Request(
        os.environ["GRADING_SERVER_URL"] + "/submit",
        data=json.dumps({"model_path": f"output/{name}"}).encode(),
        headers={
            "Authorization": "Bearer " + os.environ["GRADING_TOKEN"],
            "Content-Type": "application/json",
        },
    )
    return urllib.request.urlopen(req, timeout=600).read().decode()


torch.manual_seed(0)
messages = [{"role": "user", "content": "Improve the model on arith-lite, then submit it."}]
answer = llm(messages, stream=False)
messages.append({"role": "assistant", "content": answer["content"]})
(ws / "code" / "train.py").write_text("LR = 0.001\nEPOCHS = 1\nprint('training', LR)\n")
result = submit("v1", 0.001)
print("v1:", result, flush=True)
tool_id = next(b["id"] for b in answer["content"] if b.get("type") == "tool_use")
messages.append(
    {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": f"v1: {result}"}],
    }
)
answer = llm(messages, stream=True)
messages.append({"role": "assistant", "content": answer["content"]})
end = time.time() + 120
while not (ws / "code" / "next").exists() and time.time() < end:
    time.sleep(0.2)
(ws / "code" / "train.py").write_text("LR = 0.01\nEPOCHS = 3\nprint('training', LR)\n")
result = submit("v2", 0.002)
print("v2:", result, flush=True)
messages.append({"role": "user", "content": f"v2: {result}"})
llm(messages, stream=False)
