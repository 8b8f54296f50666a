"""The page's API documents are strict JSON (the same documents as the CLI's ``--json``)."""

from __future__ import annotations

import json


def _refuse(token: str) -> float:
    raise ValueError(f"not strict JSON: {token}")


def test_the_pages_documents_are_strict(server):
    for kind, fields in (("simulate", {"model": "llama-3.2-1b", "tp": "1", "num-requests": "40", "sessions": "4",
                                       "turns": "2", "rate": "1"}),
                         ("simulate", {"model": "llama-3.2-1b", "tp": "1", "num-requests": "40", "offline": "on"}),
                         ("step", {"model": "llama-3.2-1b", "tp": "1"})):
        status, _ = server.run(kind, fields)
        assert status["state"] == "done", status
        code, text = server.raw("GET", f"/api/jobs/{status['job']}/result")
        assert code == 200
        json.loads(text, parse_constant=_refuse)
