"""Test agent: submits a copy of the base model (graded at once), then goes over one of its
caps, bounded so that the test machine survives whatever the harness does.

``HOG=memory``: allocates 32 MB chunks (touched) up to HOG_LIMIT_MB.
``HOG=disk``: writes 16 MB files into code/ up to HOG_LIMIT_MB.
``HOG=pids``: starts sleeping children until a fork fails or HOG_LIMIT children run; writes
how many it started to code/pids.json, then exits 0.
"""

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ws = Path(os.environ["WORKSPACE"])
out = ws / "output" / "v1"
shutil.copytree(ws / "models" / "base", out, symlinks=True)
req = urllib.request.Request(
    os.environ["GRADING_SERVER_URL"] + "/submit",
    data=json.dumps({"model_path": "output/v1"}).encode(),
    headers={
        "Authorization": "Bearer " + os.environ["GRADING_TOKEN"],
        "Content-Type": "application/json",
    },
)
print(urllib.request.urlopen(req, timeout=300).read().decode(), flush=True)

kind, limit = os.environ["HOG"], int(os.environ.get("HOG_LIMIT_MB", "0"))
if kind == "memory":
    chunks = []
    for i in range(limit // 32):
        chunks.append(bytearray(32 << 20))
        chunks[-1][::4096] = b"x" * len(chunks[-1][::4096])  # touch every page
        print(f"holding {(i + 1) * 32} MB", flush=True)
        time.sleep(0.05)
elif kind == "disk":
    block = os.urandom(1 << 20) * 16
    for i in range(limit // 16):
        (ws / "code" / f"junk{i:04d}.bin").write_bytes(block)
        print(f"wrote {(i + 1) * 16} MB", flush=True)
        time.sleep(0.05)
elif kind == "pids":
    children, error = [], ""
    for _ in range(int(os.environ["HOG_LIMIT"])):
        try:
            children.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
        except OSError as err:
            error = f"{type(err).__name__}: {err}"
            break
    (ws / "code" / "pids.json").write_text(json.dumps({"started": len(children), "error": error}))
    for c in children:
        c.kill()
    sys.exit(0)
time.sleep(600)  # a cap must stop it before its budget does
