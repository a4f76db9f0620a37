"""``evaluator-host serve`` runs the service on the event loop ``uvicorn.run`` would choose: uvloop, which the
lock installs (docs/architecture.md, *Cores*). A plain ``asyncio.run`` once ran it on asyncio's pure-Python loop
unnoticed, a fifth of a millisecond more on every warm call by id (issue 55 §5). Checked on the real service
process (the shared object it mapped), never by timing."""

from __future__ import annotations

from pathlib import Path

from tests.support.service import serving


def test_the_served_service_runs_on_uvloop_as_uvicorn_run_would(tmp_path: Path) -> None:
    with serving(tmp_path / "data", "process") as (client, proc):
        assert client.get("/healthz").status_code == 200
        mapped = Path(f"/proc/{proc.pid}/maps").read_text()
    assert "uvloop/loop." in mapped, "the service's process has not loaded uvloop's loop"
