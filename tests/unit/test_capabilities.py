# ruff: noqa: E501 - expected reports read best one language a line
"""The static capability report: what a definition reaches for, in every language, with its line."""

from __future__ import annotations

from typing import Any

import pytest

from evaluator_host.definitions import languages
from evaluator_host.definitions.capabilities import KINDS, js_report, python_report

PYTHON = """import os, json
import urllib.request
from subprocess import run
import ctypes

def evaluate(inputs, outputs, trace):
    key = os.environ["KEY"]
    with open("/tmp/out", "w") as fh:
        fh.write(key)
    open("in.txt").read()
    eval("1")
    os.system("id")
    return 1
"""
JAVASCRIPT = """const fs = require('fs')
import http from "node:http"
// fetch('x') in a comment is not a call
const cp = require("child_process")
async function evaluate(inputs, outputs, trace) {
  const s = "fetch(in a string)"
  await fetch("http://example.com")
  fs.writeFileSync('/tmp/x', '1')
  const k = process.env.KEY
  new Function("return 1")
  await import(k)
  return 1
}
"""
TYPESCRIPT = """import { execSync } from "child_process"
export function evaluate(inputs: unknown, outputs: string, trace: unknown): number {
  const url: string = process.env.URL ?? ""
  execSync("id")
  return 1
}
"""


def _lines(report: dict[str, list[dict[str, Any]]]) -> dict[str, list[int]]:
    return {kind: [item["line"] for item in items] for kind, items in report.items() if items}


@pytest.mark.parametrize(
    ("language", "code", "expected"),
    [
        (
            "python",
            PYTHON,
            {
                "network": [2],
                "filesystem": [8, 10],
                "subprocess": [3, 12],
                "environment": [7],
                "dynamic_code": [11],
                "native": [4],
            },
        ),
        (
            "javascript",
            JAVASCRIPT,
            {"network": [2, 7], "filesystem": [1, 8], "subprocess": [4], "environment": [9], "dynamic_code": [10, 11]},
        ),
        ("typescript", TYPESCRIPT, {"subprocess": [1, 4], "environment": [3]}),
    ],
)
def test_each_language_reports_what_its_code_reaches_for_with_the_line(
    language: str, code: str, expected: dict[str, list[int]]
) -> None:
    report = languages.get(language).capabilities(code)
    assert set(report) == set(KINDS)
    assert _lines(report) == expected
    assert all(isinstance(item["detail"], str) and item["detail"] for items in report.values() for item in items)


def test_comments_and_strings_are_not_capabilities() -> None:
    code = "// fetch('x')\n/* eval(1) */\nconst s = 'process.env and require(\"http\")'\nfunction evaluate(i, o, t) { return 1 }\n"
    assert _lines(languages.get("javascript").capabilities(code)) == {}


def test_plain_code_reports_nothing() -> None:
    code = "import json\n\ndef evaluate(inputs, outputs, trace):\n    return json.dumps(outputs) == '1'\n"
    assert _lines(languages.get("python").capabilities(code)) == {}


@pytest.mark.parametrize(
    "code",
    [
        "import openai",
        "from openai import OpenAI",
        "import anthropic",
        "from autoevals import Factuality",
        "import autoevals.llm",
        "import litellm",
        "from langchain_openai import ChatOpenAI",
        "from langchain.chat_models import init_chat_model",
        "import httpx",
        "import requests",
        "import aiohttp",
        "import urllib3",
    ],
)
def test_a_python_package_that_makes_http_calls_counts_as_network_use(code: str) -> None:
    assert [item["line"] for item in python_report(code + "\n")["network"]] == [1]


@pytest.mark.parametrize(
    "code",
    [
        "import OpenAI from 'openai'",
        "import { Factuality } from 'autoevals'",
        "import Anthropic from '@anthropic-ai/sdk'",
        "const axios = require('axios')",
        "import fetch from 'node-fetch'",
        "import { request } from 'undici'",
    ],
)
def test_an_npm_package_that_makes_http_calls_counts_as_network_use(code: str) -> None:
    assert [item["line"] for item in js_report(code + "\n")["network"]] == [1]
