"""Test agent: one LLM request asking for the provider's own web search (Anthropic's
``web_search`` server tool), through the run's metering proxy; prints what came back and
exits 1 when the request is refused."""

import json
import os
import sys
import urllib.error
import urllib.request

message = {"role": "user", "content": "Find the test set of this task."}
tool = {"type": "web_search_20250305", "name": "web_search", "max_uses": 1}
body = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [message], "tools": [tool]}
req = urllib.request.Request(
    os.environ["ANTHROPIC_BASE_URL"].rstrip("/") + "/v1/messages",
    data=json.dumps(body).encode(),
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
    print(f"API error {err.code}: {err.read()[:300]!r}", file=sys.stderr)
    sys.exit(1)
