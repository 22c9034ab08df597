"""Test agent: one request to its LLM (through the run's metering proxy); exits 1 when the
provider refuses it, as an agent CLI does on a revoked key or an outage."""

import json
import os
import sys
import urllib.error
import urllib.request

message = {"role": "user", "content": "hi"}
body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [message]}).encode()
req = urllib.request.Request(
    os.environ["ANTHROPIC_BASE_URL"].rstrip("/") + "/v1/messages",
    data=body,
    headers={
        "content-type": "application/json",
        "x-api-key": os.environ["ANTHROPIC_API_KEY"],
        "anthropic-version": "2023-06-01",
    },
)
try:
    with urllib.request.urlopen(req, timeout=30) as resp:
        print("answered", resp.status)
except urllib.error.HTTPError as err:
    print(f"API error {err.code}: {err.read()[:200]!r}", file=sys.stderr)
    sys.exit(1)
