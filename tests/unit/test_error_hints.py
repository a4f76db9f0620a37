"""Issue 34 point 7, host side and fast: the hints a failed result gets (from the words Python and Node
really use), ANSI codes taken out, npm's pointer to a log in the throwaway build dropped, and JSON log
lines without uvicorn's coloured copy of the message."""

from __future__ import annotations

import json
import logging

import pytest

from evaluator_host.builds.build_once import trim_install_log
from evaluator_host.evaluation.results import (
    DATA_HINT,
    NETWORK_HINT,
    PKG_RESOURCES_HINT,
    _clean,
    _hints,
    strip_ansi,
)
from evaluator_host.observability.logs import JsonFormatter


@pytest.mark.parametrize(
    "message",
    [
        "[Errno 111] Connection refused",  # Python: socket, urllib, requests' underlying error
        "HTTPConnectionPool(host='localhost', port=11434): Max retries exceeded (Caused by NewConnectionError("
        "'<urllib3.connection.HTTPConnection object>: Failed to establish a new connection: "
        "[Errno 111] Connection refused'))",
        "connect ECONNREFUSED 127.0.0.1:11434",  # Node: net, http, undici's cause
        "[Errno -3] Temporary failure in name resolution",  # DNS (hinted before too)
        "getaddrinfo ENOTFOUND api.openai.com",
    ],
)
def test_a_refused_connection_gets_the_no_network_hint_as_dns_failures_do(message: str) -> None:
    assert _hints({"type": "Error", "message": message, "traceback": ""}) == [NETWORK_HINT]


def test_a_missing_pkg_resources_names_the_setuptools_pin_that_brings_it_back() -> None:
    error = {"type": "ModuleNotFoundError", "message": "No module named 'pkg_resources'", "traceback": ""}
    assert _hints(error) == [PKG_RESOURCES_HINT]
    assert "setuptools" in PKG_RESOURCES_HINT and "below 81" in PKG_RESOURCES_HINT


def test_a_library_that_would_download_data_gets_the_data_hint_once_the_colours_are_gone() -> None:
    nltk_message = (  # nltk 3.9's words, colours and all
        "\n**********************************************************************\n"
        "  Resource \x1b[93mpunkt_tab\x1b[0m not found.\n  Please use the NLTK Downloader to obtain the resource:\n\n"
        "  \x1b[31m>>> import nltk\n  >>> nltk.download('punkt_tab')\n  \x1b[0m\n"
        "  Searched in:\n    - '/nltk_data'\n"
    )
    error = _clean({"type": "LookupError", "message": nltk_message, "traceback": f"LookupError: {nltk_message}"})
    assert error is not None and "\x1b" not in error["message"] and "\x1b" not in error["traceback"]
    assert "Resource punkt_tab not found." in error["message"]
    assert _hints(error) == [DATA_HINT]


def test_strip_ansi_takes_out_colours_cursor_moves_and_titles_and_nothing_else() -> None:
    assert strip_ansi("\x1b[1;31mred\x1b[0m \x1b[2K\x1b[1Gline\x1b]0;title\x07 [not ansi] ") == "red line [not ansi] "
    assert strip_ansi("plain") == "plain"


def test_an_unrelated_failure_gets_no_hint() -> None:
    assert _hints({"type": "KeyError", "message": "'correct_answer'", "traceback": ""}) == []
    assert _hints(None) == []


@pytest.mark.parametrize(
    "log",
    [
        # npm 10+: one line
        "npm error code ETARGET\nnpm error notarget No matching version found for leven@4.0.424242.\n"
        "npm error A complete log of this run can be found in: /build/.npm-cache/_logs/2026-11-23-debug-0.log\n",
        # npm 8/9: the path on the next line
        "npm ERR! code ETARGET\nnpm ERR! notarget No matching version found for leven@4.0.424242.\n\n"
        "npm ERR! A complete log of this run can be found in:\nnpm ERR!     /tmp/x/.npm-cache/_logs/debug-0.log\n",
    ],
)
def test_npms_pointer_to_a_log_inside_the_throwaway_build_is_dropped(log: str) -> None:
    trimmed = trim_install_log(log)
    assert "No matching version found for leven@4.0.424242." in trimmed
    assert "complete log" not in trimmed and "_logs" not in trimmed and "debug-0.log" not in trimmed


def test_json_log_lines_do_not_carry_uvicorns_coloured_copy_of_the_message() -> None:
    record = logging.LogRecord("uvicorn.error", logging.INFO, __file__, 1, "Uvicorn running on %s", ("x",), None)
    record.color_message = "Uvicorn running on \x1b[1m%s\x1b[0m"
    record.request_id = "r1"  # what call sites pass as extra stays
    line = json.loads(JsonFormatter().format(record))
    assert line["msg"] == "Uvicorn running on x" and line["request_id"] == "r1"
    assert "color_message" not in line
