"""``serveplan ui``: the web planner on a local address."""

from __future__ import annotations

import socket

import typer

from serveplan.cli.base import app, fail


@app.command("ui")
def ui_cmd(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (127.0.0.1: this machine only)."),
    port: int = typer.Option(8000, "--port", help="Port to listen on."),
    max_jobs: int = typer.Option(2, "--max-jobs", help="Searches and simulations allowed to run at once."),
) -> None:
    """Serve the web planner (Plan, Simulate, Step, Offload panels) at http://HOST:PORT/; it opens
    nothing by itself. Needs the ui extra: pip install 'serveplan[ui]'."""
    try:
        import uvicorn

        from serveplan.ui.app import create_app, plotly_js
    except ImportError as exc:
        raise fail(f"serveplan ui needs the ui extra ({exc.name} is missing): pip install 'serveplan[ui]'") from None
    if plotly_js() is None:
        raise fail("serveplan ui needs plotly for its charts: pip install 'serveplan[ui]'")
    if not 0 < port < 65536:
        raise fail(f"port={port} must be in 1..65535")
    if max_jobs < 1:
        raise fail(f"max-jobs={max_jobs} must be a positive integer")
    try:  # a busy port or an address not on this machine: one line, before the server starts
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        raise fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    shown = f"[{host}]" if ":" in host else host
    typer.echo(f"serveplan ui: http://{shown}:{port}/ (Ctrl-C to stop)", err=True)
    uvicorn.run(create_app(host=host, max_jobs=max_jobs), host=host, port=port, log_level="warning")
