"""The viewer's web app: pages and a JSON API over one directory of runs and studies.

Read-only by construction: every route is a GET (any other method is a 405), and the data
layer (:mod:`agent2rl.viewer.data`) opens nothing for writing. Pages are static HTML that
fetch the API and poll it while a run is live (``/api/run/{id}/summary`` is cheap; the
timeline is refetched only when the summary's ``version`` changes).

Access: every request must carry the viewer's token, on loopback too (an agent run under
``--network host`` or ``--sandbox none`` shares the host's loopback, and must not read other
runs): ``?token=`` (the first page; it is then kept in an HttpOnly cookie), the cookie, or
``Authorization: Bearer``. A web page elsewhere (DNS rebinding) does not know it either.
"""

from __future__ import annotations

import json
import threading
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint

from agent2rl.analysis.rendering import UPLOT_CSS, UPLOT_JS, UPLOT_LICENSE, uplot_asset
from agent2rl.grading.ledger import SubmissionStatus
from agent2rl.http_api import error, install_errors, token_matches
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


def create_app(root: Path, *, token: str) -> FastAPI:
    """The viewer over ``root`` (a runs directory, a study directory, or a directory of
    them). ``token``: required on every request (at least 16 characters; ValueError else)."""
    if len(token) < 16:
        raise ValueError("the viewer's token must be at least 16 characters")
    index = Index(root)

    def warm() -> None:
        # Read every run once in the background, newest first, so that the first look at a
        # long run does not wait for its whole transcript to be parsed.
        index.scan()
        views = [v for r in list(index.runs) if (v := index.run(r)) is not None]
        views.sort(key=lambda v: v.info().get("created_at") or 0, reverse=True)
        for view in views:
            try:
                view.summary()
            except Exception:  # noqa: BLE001 - a run unreadable now is read on request
                continue

    threading.Thread(target=warm, name="viewer-warm-up", daemon=True).start()
    app = FastAPI(
        title="agent2rl viewer",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        default_response_class=FastJSON,
    )
    app.add_middleware(_Guard, token=token)

    install_errors(app, "viewer")

    def page(name: str) -> FileResponse:
        return FileResponse(
            STATIC / name, media_type="text/html", headers={"cache-control": "no-store"}
        )

    def run_or_404(run_id: str) -> RunView | JSONResponse:
        view = index.run(run_id)
        if view is None:
            return error(404, f"no run {run_id!r} under {index.root}")
        return view

    @app.get("/")
    def home() -> FileResponse:
        return page("index.html")

    @app.get("/run/{run_id}")
    def run_page(run_id: str) -> FileResponse:
        return page("run.html")

    @app.get("/study/{name}")
    def study_page(name: str) -> FileResponse:
        return page("study.html")

    @app.get("/favicon.ico")
    def favicon() -> Response:
        # Browsers ask for it whatever the page says; a 404 would be a console error.
        return Response(status_code=204)

    @app.get("/static/{name}")
    def static(name: str) -> Response:
        files = {p.name: p for p in STATIC.iterdir() if p.is_file()}
        # the charting library is the one the static report and dashboard inline
        files.update({n: uplot_asset(n) for n in (UPLOT_JS, UPLOT_CSS, UPLOT_LICENSE)})
        if name not in files:
            return error(404, f"no static file {name!r}")
        return FileResponse(files[name])

    @app.get("/api/runs")
    def runs(offset: int = 0, limit: int = PAGE) -> Any:
        if offset < 0 or not 0 < limit <= 1000:
            return error(400, "offset must be >= 0 and limit between 1 and 1000")
        index.scan()
        views = [v for run_id in index.runs if (v := index.run(run_id)) is not None]
        # Newest first, from run.json alone; the full summary only for the page shown.
        views.sort(key=lambda v: v.info().get("created_at") or 0, reverse=True)
        rows = [v.summary() for v in views[offset : offset + limit]]
        studies = []
        for name, path in sorted(index.studies.items()):
            st = read_study(path, counts_only=True)
            studies.append(
                {"id": name, "name": st["name"], "counts": st["counts"], "slots": st["total"]}
            )
        return {
            "root": str(index.root),
            "runs": rows,
            "total": len(views),
            "offset": offset,
            "studies": studies,
        }

    @app.get("/api/run/{run_id}/summary")
    def summary(run_id: str) -> Any:
        view = run_or_404(run_id)
        return view if isinstance(view, JSONResponse) else view.summary()

    @app.get("/api/run/{run_id}/timeline")
    def timeline(run_id: str) -> Any:
        view = run_or_404(run_id)
        if isinstance(view, JSONResponse):
            return view
        events = view.timeline()
        dropped = max(0, len(events) - MAX_EVENTS)
        return FastJSON({"events": events[dropped:], "dropped": dropped, "summary": view.summary()})

    @app.get("/api/run/{run_id}/charts")
    def charts(run_id: str) -> Any:
        view = run_or_404(run_id)
        if isinstance(view, JSONResponse):
            return view
        subs = view.ledger()["submissions"]
        llm = view.llm()
        tokens, total = [], 0
        for e in llm:
            total += (e.get("input_tokens") or 0) + (e.get("output_tokens") or 0)
            tokens.append([e.get("t"), total])
        res = view.resources()
        # Thinned to at most ~2,000 points a series: a 12-hour run samples every 5 s.
        step = max(1, len(res) // 2000)
        tstep = max(1, len(tokens) // 2000)
        return {
            "baseline": view.ledger()["baseline"],
            "scores": [
                [s["submitted_at"], s["score"], s["id"]]
                for s in subs
                if s["status"] == SubmissionStatus.GRADED and s["score"] is not None
            ],
            "tokens": tokens[::tstep] + ([tokens[-1]] if tokens and len(tokens) % tstep else []),
            "resources": [
                [r.get("t"), r.get("cpu_percent"), (r.get("rss_bytes") or 0) / 2**20]
                for r in res[::step]
            ],
        }

    @app.get("/api/run/{run_id}/llm/{index_}")
    def exchange(run_id: str, index_: int) -> Any:
        view = run_or_404(run_id)
        if isinstance(view, JSONResponse):
            return view
        line = view.exchange(index_)
        if line is None:
            return error(404, f"no LLM exchange #{index_} in run {run_id!r}")
        return line

    @app.get("/api/run/{run_id}/diff/{sha}")
    def diff(run_id: str, sha: str) -> Any:
        view = run_or_404(run_id)
        if isinstance(view, JSONResponse):
            return view
        text = view.diff(sha)
        if text is None:
            return error(404, f"no code snapshot {sha!r} in run {run_id!r}")
        return PlainTextResponse(text)

    @app.get("/api/run/{run_id}/search")
    def search(run_id: str, q: str = "") -> Any:
        view = run_or_404(run_id)
        if isinstance(view, JSONResponse):
            return view
        if len(q) > 500:
            return error(400, "search text is limited to 500 characters")
        return {"q": q, "ids": view.search(q)}

    @app.get("/api/study/{name}")
    def study(name: str, offset: int = 0, limit: int = PAGE) -> Any:
        if offset < 0 or not 0 < limit <= 1000:
            return error(400, "offset must be >= 0 and limit between 1 and 1000")
        path = index.study(name)
        if path is None:
            return error(404, f"no study {name!r} under {index.root}")
        st = read_study(path)
        rows = []
        keys = ("id", "key", "task", "model", "agent", "status", "attempts", "run_status", "error")
        for s in st["slots"][offset : offset + limit]:
            run_id = index.run_id_of(s.get("run_dir"))
            view = index.run(run_id) if run_id else None
            info = view.brief() if view is not None else None
            rows.append(
                {
                    **{k: s[k] for k in keys},
                    "run_id": run_id,
                    "best": info["best"] if info else None,
                    "submissions": info["submissions"] if info else None,
                    "progress": _progress(info),
                }
            )
        return {
            "name": st["name"],
            "counts": st["counts"],
            "total": st["total"],
            "offset": offset,
            "slots": rows,
        }

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
