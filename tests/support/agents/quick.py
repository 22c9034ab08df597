"""Test agent: submits at once the base model's weights nudged by a little noise, waits for
the grade and exits: a run that takes seconds beyond its grading, for studies and
dashboards."""

import json
import os
import shutil
import urllib.request
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

ws = Path(os.environ["WORKSPACE"])
torch.manual_seed(int.from_bytes(os.urandom(2), "little"))
out = ws / "output" / "v1"
shutil.copytree(ws / "models" / "base", out)
weights = load_file(out / "model.safetensors")
save_file(
    {k: v + 0.002 * torch.randn_like(v) for k, v in weights.items()},
    out / "model.safetensors",
    metadata={"format": "pt"},
)
req = urllib.request.Request(
    os.environ["GRADING_SERVER_URL"] + "/submit",
    data=json.dumps({"model_path": "output/v1"}).encode(),
    headers={
        "Authorization": "Bearer " + os.environ["GRADING_TOKEN"],
        "Content-Type": "application/json",
    },
)
print(urllib.request.urlopen(req, timeout=600).read().decode(), flush=True)
