"""An app that was made (and started, and stopped) is freed once nothing refers to it: a process that makes many —
a test suite, an embedder's own tests — does not keep them all.

Two causes kept every app alive, about 1 MB each (the suite's test processes grew past 1.5 GB, and a run
on a 3 GiB machine had its test processes killed for memory): the ``/docs`` endpoints closed over their app,
and FastAPI keeps the endpoints it classified in a process-wide cache; and each service start froze every
object then alive (``gc.freeze``), the apps before it included, where frozen objects are never collected.
Now the endpoints read their app from the request, and a process freezes its start-up objects once.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient

from evaluator_host.api import create_app
from tests.support.service import make_settings


def _made(tmp_path: Path, name: str, *, start: bool) -> weakref.ref[FastAPI]:
    app = create_app(make_settings(tmp_path / name, backend="process"))
    if start:
        with TestClient(app) as client:
            assert client.get("/healthz").status_code == 200
            assert client.get("/docs").status_code == 200  # its endpoints classified and called
    else:
        with TestClient(app) as client:  # started, for the freeze below: this process's first start, maybe
            pass
    return weakref.ref(app)


def test_an_app_made_and_never_started_is_freed(tmp_path: Path) -> None:
    made = weakref.ref(create_app(make_settings(tmp_path / "never", backend="process")))
    gc.collect()
    assert made() is None


def test_apps_started_and_stopped_after_the_first_are_freed(tmp_path: Path) -> None:
    _made(tmp_path, "first", start=False)  # the process's first start may freeze its app: that one is kept
    later = [_made(tmp_path, f"app{n}", start=True) for n in range(3)]
    gc.collect()
    assert [ref() is None for ref in later] == [True, True, True]


def test_the_docs_page_still_names_its_app_and_openapi_url(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path / "docs", backend="process"))) as client:
        page = client.get("/docs")
        assert page.status_code == 200
        assert "evaluator-host — API" in page.text and "/openapi.json" in page.text
        assert "/docs" not in client.get("/openapi.json").json()["paths"]
