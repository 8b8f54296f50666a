"""The web planner's HTTP interface (FastAPI): the page, its assets, and a small JSON API.

==========================================  =====================================================
``GET  /``                                  the page (panels Plan, Simulate, Step, Offload)
``GET  /static/...``                        its script, style sheet and plotly.js (from the
                                            ``plotly`` package: the page needs no network)
``GET  /api/schema``                        panels, their fields (the CLI's options), catalogs
``GET  /api/check/{panel}?field=value``     validate inputs: the equivalent command or the error
``POST /api/run/{panel}``  (JSON fields)    start (or reuse) a job: ``{"job", "command", ...}``
``GET  /api/jobs/{id}``                     progress: ``{"state", "done", "total", ...}``
``GET  /api/jobs/{id}/result``              the document the command prints with ``--json``
``GET  /api/jobs/{id}/extra``               what only the page draws (latency samples, roofline)
``GET  /api/jobs/{id}/deploy?strategy=...`` launch commands of another strategy of a plan
``DELETE /api/jobs/{id}``                   cancel
==========================================  =====================================================

Errors are ``{"error": message}`` with the message the CLI prints after ``error:``; status 400 for
bad input, 422 for an infeasible request, 429 when too many jobs run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.middleware.trustedhost import TrustedHostMiddleware

from serveplan import __version__
from serveplan.errors import PlannerError
from serveplan.ui import service
from serveplan.ui.jobs import BusyError, JobManager

STATIC = Path(__file__).parent / "static"
MAX_BODY_BYTES = 65_536  # a form's fields are a few hundred bytes


def plotly_js() -> Path | None:
    """plotly.min.js as the ``plotly`` Python package ships it (no CDN)."""
    try:
        import plotly
    except ImportError:
        return None
    p = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    return p if p.exists() else None


def _error(exc: BaseException, status: int | None = None) -> JSONResponse:
    text, code = service.error_text(exc)
    return JSONResponse({"error": text, "exit_code": code}, status_code=status or (422 if code == 3 else 400))


def create_app(*, host: str = "127.0.0.1", max_jobs: int = 2, time_limit_s: float = 600.0) -> FastAPI:
    """The application; ``host`` is the address it is served on (requests naming another host
    are refused, which keeps other sites' pages from reaching it through DNS rebinding)."""
    jobs = JobManager(max_jobs=max_jobs, time_limit_s=time_limit_s)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        jobs.warm()
        yield
        jobs.shutdown()

    app = FastAPI(title="serveplan", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    allowed = ["*"] if host in ("0.0.0.0", "::", "") else [host, "127.0.0.1", "localhost", "[::1]", "::1"]
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=allowed)
    app.state.jobs = jobs

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    @app.get("/static/vendor/plotly.min.js", include_in_schema=False)
    def plotly() -> Response:
        p = plotly_js()
        if p is None:
            return Response("// plotly is not installed: pip install 'serveplan[ui]'", media_type="text/javascript",
                            status_code=404)
        return FileResponse(p, media_type="text/javascript", headers={"Cache-Control": "max-age=86400"})

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/api/schema")
    def schema() -> dict[str, Any]:
        return service.schema() | {"version": __version__}

    @app.get("/api/check/{panel}")
    def check(panel: str, request: Request) -> Any:
        try:
            req = service.parse(panel, dict(request.query_params))
            service.prepare(req)
        except PlannerError as exc:
            return _error(exc)
        return {"command": req.command}

    @app.post("/api/run/{panel}")
    async def run(panel: str, request: Request) -> Any:
        if int(request.headers.get("content-length") or 0) > MAX_BODY_BYTES:
            return JSONResponse({"error": f"request body over {MAX_BODY_BYTES} bytes"}, status_code=413)
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return JSONResponse({"error": "the request body must be a JSON object of fields"}, status_code=400)
        try:
            prep = service.prepare(service.parse(panel, body))
            job, cached = jobs.submit(prep)
        except PlannerError as exc:
            return _error(exc)
        except BusyError as exc:
            return JSONResponse({"error": str(exc)}, status_code=429)
        return job.status() | {"cached": cached}

    _job_routes(app, jobs)
    return app


def _job_routes(app: FastAPI, jobs: JobManager) -> None:
    """Progress, results, cancellation and the deploy commands of a job."""

    def _job(job_id: str) -> Any:
        job = jobs.get(job_id)
        if job is None:
            return None, JSONResponse({"error": f"no job {job_id!r} (finished jobs are kept a while)"},
                                      status_code=404)
        return job, None

    @app.get("/api/jobs/{job_id}")
    def status(job_id: str) -> Any:
        job, err = _job(job_id)
        return err or job.status()

    @app.delete("/api/jobs/{job_id}")
    def cancel(job_id: str) -> Any:
        job, err = _job(job_id)
        if err is not None:
            return err
        cancelled = jobs.cancel(job_id)
        assert cancelled is not None  # _job found it
        return cancelled.status()

    def _finished(job_id: str) -> Any:
        job, err = _job(job_id)
        if err is not None:
            return None, err
        if job.state == "error":
            return None, JSONResponse({"error": job.error, "exit_code": job.exit_code},
                                      status_code=422 if job.exit_code == 3 else 400)
        if job.state != "done":
            return None, JSONResponse({"error": f"job {job_id} is {job.state}"}, status_code=409)
        return job, None

    @app.get("/api/jobs/{job_id}/result")
    def result(job_id: str) -> Any:
        job, err = _finished(job_id)
        return err or JSONResponse(job.document)

    @app.get("/api/jobs/{job_id}/extra")
    def extra(job_id: str) -> Any:
        job, err = _finished(job_id)
        return err or JSONResponse(job.extra)

    @app.get("/api/jobs/{job_id}/deploy")
    def deploy(job_id: str, strategy: str) -> Any:
        job, err = _finished(job_id)
        if err is not None:
            return err
        rows = [r for r in job.document.get("strategies", []) if r["name"] == strategy]
        if job.prepared.request.kind != "plan" or not rows:
            return JSONResponse({"error": f"strategy {strategy!r} is not in this plan"}, status_code=404)
        return service.deploy_for(job.prepared, rows[0])
