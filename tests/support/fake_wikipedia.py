"""A fake Wikipedia: a real HTTP server on loopback that speaks the MediaWiki Action API's
full-text search (``GET /w/api.php?action=query&list=search&srsearch=...&format=json&
formatversion=2``), over a list of documents (``title``, ``text``).

Its answers have the real API's shape: ``{"batchcomplete": true, "query": {"searchinfo":
{"totalhits": N}, "search": [{"ns": 0, "title", "pageid", "size", "wordcount", "snippet",
"timestamp"}]}}``, with the snippet as MediaWiki writes it (HTML: query words wrapped in
``<span class="searchmatch">``, special characters as entities); an API error is HTTP 200
with ``{"error": {"code", "info"}}``, as MediaWiki answers one. A document ranks by the
number of query words it shares (ties in list order); documents sharing none are not hits.

Failures are settings of the server: ``fail`` (answer this many requests with ``fail_status``,
503 by default, with ``Retry-After: 0``), ``delay_s`` (hang before answering: a client's
timeout), ``api_error`` (the next answer an API error with this code), ``garbage`` (the next
answer is not JSON). ``queries`` keeps every query searched and ``agents`` every
User-Agent seen.
"""

from __future__ import annotations

import html
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

_WORD = re.compile(r"\w+")


def _snippet(text: str, words: set[str]) -> str:
    """``text`` as MediaWiki's HTML snippet: escaped, query words highlighted."""
    out = html.escape(text, quote=True)
    return _WORD.sub(
        lambda m: (
            f'<span class="searchmatch">{m.group(0)}</span>'
            if m.group(0).lower() in words
            else m.group(0)
        ),
        out,
    )


class FakeWikipedia:
    def __init__(self, docs: list[dict[str, Any]]) -> None:
        self.docs = docs
        self.queries: list[str] = []
        self.agents: list[str] = []
        self.fail = 0
        self.fail_status = 503
        self.delay_s = 0.0
        self.api_error = ""
        self.garbage = False
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urlparse(self.path)
                q = {k: v[0] for k, v in parse_qs(url.query).items()}
                outer.agents.append(self.headers.get("User-Agent", ""))
                if outer.delay_s:
                    time.sleep(outer.delay_s)
                if outer.fail:
                    outer.fail -= 1
                    return self._send(outer.fail_status, b"busy", {"Retry-After": "0"})
                if outer.garbage:
                    outer.garbage = False
                    return self._send(200, b"<html>Wikimedia Error</html>")
                if url.path != "/w/api.php":
                    return self._send(404, b"not found")
                if outer.api_error:
                    code, outer.api_error = outer.api_error, ""
                    return self._json({"error": {"code": code, "info": f"{code} (fake)"}})
                if q.get("action") != "query" or q.get("list") != "search":
                    return self._json({"error": {"code": "badvalue", "info": "not a search"}})
                if q.get("format") != "json" or q.get("formatversion") != "2":
                    return self._json({"error": {"code": "badformat", "info": "json v2 only"}})
                query = q.get("srsearch", "")
                if not query:
                    return self._json({"error": {"code": "nosrsearch", "info": "srsearch"}})
                outer.queries.append(query)
                self._json(outer.search(query, int(q.get("srlimit", "10"))))

            def _json(self, body: dict[str, Any]) -> None:
                self._send(200, json.dumps(body).encode(), {"Content-Type": "application/json"})

            def _send(
                self, status: int, data: bytes, headers: dict[str, str] | None = None
            ) -> None:
                try:
                    self.send_response(status)
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left: what a timeout test wants

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.url = f"{self.base}/w/api.php"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def search(self, query: str, limit: int) -> dict[str, Any]:
        """The API's answer to ``query``: the ``limit`` best documents."""
        words = {w.lower() for w in _WORD.findall(query)}
        scored = []
        for i, d in enumerate(self.docs):
            n = len(words & {w.lower() for w in _WORD.findall(f"{d['title']} {d['text']}")})
            if n:
                scored.append((-n, i))
        rows = [
            {
                "ns": 0,
                "title": self.docs[i]["title"],
                "pageid": 1000 + i,
                "size": len(self.docs[i]["text"]),
                "wordcount": len(self.docs[i]["text"].split()),
                "snippet": _snippet(self.docs[i]["text"], words),
                "timestamp": "2025-01-01T00:00:00Z",
            }
            for _, i in sorted(scored)[:limit]
        ]
        return {
            "batchcomplete": True,
            "continue": {"sroffset": len(rows), "continue": "-||"},
            "query": {"searchinfo": {"totalhits": len(scored)}, "search": rows},
        }

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_fake_wikipedia(docs: list[dict[str, Any]]) -> FakeWikipedia:
    """A fake Wikipedia over ``docs``, serving on a free loopback port."""
    return FakeWikipedia(docs)
