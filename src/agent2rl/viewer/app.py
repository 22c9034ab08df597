"""The viewer's web app: pages and a JSON API over one directory of runs and studies.

Read-only by construction: every route is a GET (any other method is a 405), and the data
layer (:mod:`agent2rl.viewer.data`) opens nothing for writing. Pages are static HTML that
fetch the API and poll it while a run is live (``/api/run/{id}/summary`` is cheap; the
timeline is refetched only when the summary's ``version`` changes).

Access: every request must carry the viewer's token, on loopback too (why:
:mod:`agent2rl.viewer.serve`): ``?token=`` (the first page; it is then kept in an HttpOnly
cookie), the cookie, or ``Authorization: Bearer``. A web page elsewhere (DNS rebinding) does
not know it either.
"""

from __future__ import annotations

import json
import threading
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint

from agent2rl.analysis.rendering import UPLOT_CSS, UPLOT_JS, UPLOT_LICENSE, uplot_asset
from agent2rl.grading.ledger import SubmissionStatus
from agent2rl.http_api import Refused, error, install_errors, token_matches
from agent2rl.viewer.data import Index, RunView, read_study

STATIC = Path(str(resources.files("agent2rl.viewer") / "static"))
COOKIE = "agent2rl_view"
#: timeline events served at most per request (newest kept; the page says how many are left)
MAX_EVENTS = 20_000
#: rows of the run list and of a study's slots per page
PAGE = 200


class FastJSON(JSONResponse):
    """JSON straight from ``json.dumps``: FastAPI's own encoder walks every value in Python
    and takes seconds on a 10,000-call timeline."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, separators=(",", ":"), default=str).encode()


class _Guard(BaseHTTPMiddleware):
    """GET (and HEAD) only, and the token on every request."""

    def __init__(self, app: Any, token: str) -> None:
        super().__init__(app)
        self.token = token

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        if request.method not in ("GET", "HEAD"):
            return error(405, "the viewer is read-only: only GET requests are served")
        given = [
            request.query_params.get("token", ""),
            request.cookies.get(COOKIE, ""),
            request.headers.get("authorization", "").removeprefix("Bearer ").strip(),
        ]
        ok = [token_matches(g, self.token) for g in given]
        if not any(ok):
            return error(401, "this viewer needs its token: open the URL `agent2rl view` printed")
        response = await call_next(request)
        if ok[0] and not ok[1]:
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="strict")
        return response


class ViewerService:
    """What the viewer answers about ``root`` (a runs directory, a study directory, or a
    directory of them), one method per API route, each a JSON-ready dict. A run or study
    that is not there, or a bad page, raises :class:`~agent2rl.http_api.Refused` (404, 400).
    Reads only: the data layer opens nothing for writing."""

    def __init__(self, root: Path) -> None:
        self.index = Index(root)

    def warm(self) -> None:
        """Read every run once, newest first, so that the first look at a long run does
        not wait for its whole transcript to be parsed; a run unreadable now is skipped."""
        for view in self._views():
            try:
                view.summary()
            except Exception:  # noqa: BLE001 - a run unreadable now is read on request
                continue

    def runs(self, offset: int = 0, limit: int = PAGE) -> dict[str, Any]:
        """A page of runs, newest first, and every study's counts."""
        _check_page(offset, limit)
        views = self._views()
        studies = []
        for name, path in sorted(self.index.studies.items()):
            st = read_study(path, counts_only=True)
            studies.append(
                {"id": name, "name": st["name"], "counts": st["counts"], "slots": st["total"]}
            )
        return {
            "root": str(self.index.root),
            "runs": [v.summary() for v in views[offset : offset + limit]],
            "total": len(views),
            "offset": offset,
            "studies": studies,
        }

    def run(self, run_id: str) -> RunView:
        view = self.index.run(run_id)
        if view is None:
            raise Refused(404, f"no run {run_id!r} under {self.index.root}")
        return view

    def summary(self, run_id: str) -> dict[str, Any]:
        return self.run(run_id).summary()

    def timeline(self, run_id: str) -> dict[str, Any]:
        """The newest :data:`MAX_EVENTS` events, how many older ones were dropped, and the
        run's summary."""
        view = self.run(run_id)
        events = view.timeline()
        dropped = max(0, len(events) - MAX_EVENTS)
        return {"events": events[dropped:], "dropped": dropped, "summary": view.summary()}

    def charts(self, run_id: str) -> dict[str, Any]:
        """Graded scores, cumulative LLM tokens and resource samples, each series thinned
        to about 2,000 points (a 12-hour run samples every 5 s); the last token point kept."""
        view = self.run(run_id)
        ledger = view.ledger()
        tokens, total = [], 0
        for e in view.llm():
            total += (e.get("input_tokens") or 0) + (e.get("output_tokens") or 0)
            tokens.append([e.get("t"), total])
        res = view.resources()
        step = max(1, len(res) // 2000)
        tstep = max(1, len(tokens) // 2000)
        return {
            "baseline": ledger["baseline"],
            "scores": [
                [s["submitted_at"], s["score"], s["id"]]
                for s in ledger["submissions"]
                if s["status"] == SubmissionStatus.GRADED and s["score"] is not None
            ],
            "tokens": tokens[::tstep] + ([tokens[-1]] if tokens and len(tokens) % tstep else []),
            "resources": [
                [r.get("t"), r.get("cpu_percent"), (r.get("rss_bytes") or 0) / 2**20]
                for r in res[::step]
            ],
        }

    def exchange(self, run_id: str, index: int) -> dict[str, Any]:
        line = self.run(run_id).exchange(index)
        if line is None:
            raise Refused(404, f"no LLM exchange #{index} in run {run_id!r}")
        return line

    def diff(self, run_id: str, sha: str) -> str:
        text = self.run(run_id).diff(sha)
        if text is None:
            raise Refused(404, f"no code snapshot {sha!r} in run {run_id!r}")
        return text

    def search(self, run_id: str, q: str = "") -> dict[str, Any]:
        view = self.run(run_id)
        if len(q) > 500:
            raise Refused(400, "search text is limited to 500 characters")
        return {"q": q, "ids": view.search(q)}

    def study(self, name: str, offset: int = 0, limit: int = PAGE) -> dict[str, Any]:
        """A page of study ``name``'s slots, each with its run's best score, submissions
        and progress (None where the slot has no run yet)."""
        _check_page(offset, limit)
        path = self.index.study(name)
        if path is None:
            raise Refused(404, f"no study {name!r} under {self.index.root}")
        st = read_study(path)
        keys = ("id", "key", "task", "model", "agent", "status", "attempts", "run_status", "error")
        rows = []
        for s in st["slots"][offset : offset + limit]:
            run_id = self.index.run_id_of(s.run_dir)
            view = self.index.run(run_id) if run_id else None
            info = view.brief() if view is not None else None
            row = {k: getattr(s, k) for k in keys} | {"run_id": run_id, "progress": _progress(info)}
            rows.append(row | {k: info[k] if info else None for k in ("best", "submissions")})
        keep = ("name", "counts", "total")
        return {**{k: st[k] for k in keep}, "offset": offset, "slots": rows}

    def _views(self) -> list[RunView]:
        # Newest first, from run.json alone: the full summary is read only where needed.
        self.index.scan()
        views = [v for run_id in list(self.index.runs) if (v := self.index.run(run_id))]
        views.sort(key=lambda v: v.info().get("created_at") or 0, reverse=True)
        return views


def _check_page(offset: int, limit: int) -> None:
    if offset < 0 or not 0 < limit <= 1000:
        raise Refused(400, "offset must be >= 0 and limit between 1 and 1000")


def _static_file(name: str) -> FileResponse:
    """The viewer's static file ``name``, or the charting library's (the one the static
    report and dashboard inline); 404 for any other name (no path is ever joined)."""
    files = {p.name: p for p in STATIC.iterdir() if p.is_file()}
    files.update({n: uplot_asset(n) for n in (UPLOT_JS, UPLOT_CSS, UPLOT_LICENSE)})
    if name not in files:
        raise Refused(404, f"no static file {name!r}")
    return FileResponse(files[name])


def _page(name: str) -> FileResponse:
    headers = {"cache-control": "no-store"}
    return FileResponse(STATIC / name, media_type="text/html", headers=headers)


def create_app(root: Path, *, token: str) -> FastAPI:
    """The viewer over ``root`` (:class:`ViewerService`), warmed up in the background.
    ``token``: required on every request (at least 16 characters; ValueError else)."""
    if len(token) < 16:
        raise ValueError("the viewer's token must be at least 16 characters")
    service = ViewerService(root)
    threading.Thread(target=service.warm, name="viewer-warm-up", daemon=True).start()
    app = FastAPI(
        title="agent2rl viewer",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        default_response_class=FastJSON,
    )
    app.add_middleware(_Guard, token=token)
    install_errors(app, "viewer")
    # Routes call the service's methods as they are; no response model: their dicts are
    # encoded as they are (FastAPI would otherwise validate every timeline event).
    get = partial(app.get, response_model=None)
    for path, name in (("/", "index"), ("/run/{run_id}", "run"), ("/study/{name}", "study")):
        get(path)(partial(_page, f"{name}.html"))
    # Browsers ask for it whatever the page says; a 404 would be a console error.
    get("/favicon.ico")(lambda: Response(status_code=204))
    get("/static/{name}")(_static_file)
    get("/api/runs")(service.runs)
    get("/api/run/{run_id}/summary")(service.summary)
    # Straight to FastJSON: FastAPI's own encoding of a long timeline takes seconds.
    get("/api/run/{run_id}/timeline")(lambda run_id: FastJSON(service.timeline(run_id)))
    get("/api/run/{run_id}/charts")(service.charts)
    get("/api/run/{run_id}/llm/{index}")(service.exchange)
    get("/api/run/{run_id}/diff/{sha}")(
        lambda run_id, sha: PlainTextResponse(service.diff(run_id, sha))
    )
    get("/api/run/{run_id}/search")(service.search)
    get("/api/study/{name}")(service.study)
    return app


def _progress(info: dict[str, Any] | None) -> float | None:
    """How far a run is through its budget, 0..1 (1 once it ended); None when unknown."""
    if info is None:
        return None
    if not info["live"]:
        return 1.0
    start, deadline = info.get("start"), info.get("deadline")
    if not start or not deadline or deadline <= start:
        return 0.0
    return min(1.0, max(0.0, (info["now"] - start) / (deadline - start)))
