"""Prometheus metrics of one service (``GET /metrics``), on a registry of its own.

Names and what they count (no tenant, evaluator or user id is ever a label):

* ``http_server_request_duration_seconds{http_request_method, http_route, http_response_status_code}``
  — the OpenTelemetry name; buckets from 100 µs, since a warm evaluation answers in about a
  millisecond (a first bucket of 5 ms would hide every one of them); ``http_route`` is the route
  template, ``other`` for paths no route matched; ``http_request_method`` is one of the standard
  methods (``GET HEAD POST PUT DELETE CONNECT OPTIONS TRACE PATCH``) or ``_OTHER`` (OpenTelemetry's
  rule), so a client cannot grow the label set by inventing methods either;
* ``evaluator_host_evaluations_total{status, language, backend}`` — every normalized result, calls
  and job rows alike;
* ``evaluator_host_worker_starts_total{backend}`` — processes or containers started (cold starts);
  ``evaluator_host_worker_evictions_total{backend}`` — warm workers evicted to make room;
* ``evaluator_host_pool_workers{state}`` — ``busy``, ``idle`` and ``spare`` workers, read at scrape time;
  ``evaluator_host_pool_wait_seconds`` — how long calls that found no free worker waited for one;
* ``evaluator_host_builds_total{result}`` and ``evaluator_host_build_seconds`` — runtime builds;
* ``evaluator_host_job_rows_total{status}`` — job rows committed (``rate()`` of it is rows/s);
* ``evaluator_host_swept_containers_total`` — leftover containers removed by start-up sweeps;
* ``evaluator_host_online_spans_total{outcome}`` — OTLP spans received: ``stored``, ``duplicate`` (already
  stored: ignored), ``rejected`` (answered in a partial success); ``evaluator_host_online_requests_total{outcome}``
  — ``POST /v1/traces`` requests: ``ok``, ``partial``, ``invalid`` (400), ``too_large`` (413),
  ``unsupported`` (415), ``quota`` (429: none of the spans fits under the workspace's storage quota),
  ``full`` (503: the workspace holds its share of ``ONLINE_MAX_STORED_SPANS``, the exporter retries);
  ``evaluator_host_online_open_traces`` — traces still assembling (read by assembly's last pass);
  ``evaluator_host_online_traces_ready_total`` and ``evaluator_host_online_spans_expired_total`` — assembly's
  and retention's work; forwarding (issue 52): ``evaluator_host_online_forwarded_spans_total{outcome}``
  (``sent``, ``dropped`` past ``ONLINE_FORWARD_MAX_BYTES``, ``refused`` by the endpoint or its host check),
  ``evaluator_host_online_forward_requests_total{outcome}`` (``ok``, ``retried``, ``refused``) and
  ``evaluator_host_online_forward_queued_bytes``.
* online scoring (docs/online.md): ``evaluator_host_online_scores_total{rule, status}`` — scores
  stored, ``evaluator_host_online_score{rule}`` — their numeric scores,
  ``evaluator_host_online_dropped_total{rule}`` — score rows dropped (backlog full),
  ``evaluator_host_online_scoring_lag_seconds`` — a trace's last span to its stored score,
  ``evaluator_host_online_backlog`` — scores queued or running (every service's; read at scrape time).
  ``rule`` is the one id label: a rule is an operator-visible configuration object a workspace
  creates deliberately (not per request or per user), and the issue asks for per-rule series.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE", "HTTP_METHODS", "Metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_FAST_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_SLOW_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
# the methods the request histogram names; any other is counted as "_OTHER"
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"})


class _PoolCollector(Collector):
    """The pool's worker counts, read when scraped (nothing to update on the hot path)."""

    def __init__(self, read: Callable[[], dict[str, int]]) -> None:
        self._read = read

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily("evaluator_host_pool_workers", "Warm workers by state.", labels=["state"])
        for state, count in self._read().items():
            family.add_metric([state], count)
        yield family


class _BacklogCollector(Collector):
    """The online scoring backlog as the router last counted it."""

    def __init__(self, read: Callable[[], int]) -> None:
        self._read = read

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily("evaluator_host_online_backlog", "Online scores queued or running.")
        family.add_metric([], self._read())
        yield family


class Metrics:
    """Every metric of one service; components count through it (a fresh one counts nowhere visible)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.http = Histogram(
            "http_server_request_duration_seconds",
            "Duration of HTTP server requests.",
            ["http_request_method", "http_route", "http_response_status_code"],
            buckets=_FAST_BUCKETS,
            registry=r,
        )
        self.evaluations = Counter(
            "evaluator_host_evaluations", "Evaluations by result status.", ["status", "language", "backend"], registry=r
        )
        self.worker_starts = Counter(
            "evaluator_host_worker_starts", "Workers started (cold starts).", ["backend"], registry=r
        )
        self.evictions = Counter(
            "evaluator_host_worker_evictions", "Warm workers evicted to make room.", ["backend"], registry=r
        )
        self.pool_wait = Histogram(
            "evaluator_host_pool_wait_seconds",
            "Time calls that found no free worker waited for one.",
            buckets=_FAST_BUCKETS,
            registry=r,
        )
        self.builds = Counter("evaluator_host_builds", "Runtime builds by result.", ["result"], registry=r)
        self.build_seconds = Histogram(
            "evaluator_host_build_seconds", "Duration of runtime builds.", buckets=_SLOW_BUCKETS, registry=r
        )
        self.job_rows = Counter("evaluator_host_job_rows", "Job rows committed, by status.", ["status"], registry=r)
        self.queue_refused = Counter(
            "evaluator_host_queue_tasks_refused",
            "Chunk tasks a worker host refused (forged or altered), by reason.",
            ["reason"],
            registry=r,
        )
        self.swept = Counter(
            "evaluator_host_swept_containers", "Leftover containers removed by start-up sweeps.", registry=r
        )
        self.online_scores = Counter(
            "evaluator_host_online_scores", "Online scores stored, by rule and status.", ["rule", "status"], registry=r
        )
        self.online_score_values = Histogram(
            "evaluator_host_online_score",
            "Numeric scores of online rules.",
            ["rule"],
            buckets=(0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
            registry=r,
        )
        self.online_dropped_total = Counter(
            "evaluator_host_online_dropped", "Online score rows dropped (backlog full), by rule.", ["rule"], registry=r
        )
        self.online_lag = Histogram(
            "evaluator_host_online_scoring_lag_seconds",
            "From a trace's last span to its stored score.",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300),
            registry=r,
        )
        self.online_spans = Counter(
            "evaluator_host_online_spans", "OTLP spans received, by outcome.", ["outcome"], registry=r
        )
        self.online_requests = Counter(
            "evaluator_host_online_requests", "POST /v1/traces requests, by outcome.", ["outcome"], registry=r
        )
        self.online_open = Gauge("evaluator_host_online_open_traces", "Traces still assembling.", registry=r)
        self.online_ready = Counter("evaluator_host_online_traces_ready", "Traces assembly made ready.", registry=r)
        self.online_expired = Counter(
            "evaluator_host_online_spans_expired", "Raw spans deleted by retention.", registry=r
        )
        self.forwarded = Counter(  # issue 52: online/receive/forwarding.py
            "evaluator_host_online_forwarded_spans",
            "Received spans forwarded to OTLP endpoints, by outcome (sent, dropped: past the memory bound, "
            "refused: the endpoint refused them or may not be called).",
            ["outcome"],
            registry=r,
        )
        self.forward_requests = Counter(
            "evaluator_host_online_forward_requests",
            "Forwarding requests, by outcome (ok, retried, refused).",
            ["outcome"],
            registry=r,
        )
        self.forward_queued = Gauge(
            "evaluator_host_online_forward_queued_bytes", "Span bytes waiting to be forwarded.", registry=r
        )
        self._children: dict[tuple[Any, ...], Any] = {}

    def watch_pool(self, read: Callable[[], dict[str, int]]) -> None:
        """Report the pool's worker counts (``read`` is called at each scrape)."""
        self.registry.register(_PoolCollector(read))

    def watch_online(self, read: Callable[[], int]) -> None:
        """Report the online backlog (``read`` is called at each scrape)."""
        self.registry.register(_BacklogCollector(read))

    def online_scored(self, rule: str, status: str, score: float | None, lag_s: float | None) -> None:
        """One stored online score."""
        self.online_scores.labels(rule, status).inc()
        if score is not None:
            self.online_score_values.labels(rule).observe(score)
        if lag_s is not None:
            self.online_lag.observe(max(lag_s, 0.0))

    def online_dropped(self, rule: str, n: int) -> None:
        """``n`` score rows of ``rule`` stored dropped."""
        self.online_dropped_total.labels(rule).inc(n)

    def evaluated(self, status: str, language: str, backend: str, n: int = 1) -> None:
        """Count ``n`` results of ``status`` (the labelled child is looked up once)."""
        key = ("e", status, language, backend)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self.evaluations.labels(status, language, backend)
        child.inc(n)

    def request(self, method: str, route: str, status: int, seconds: float) -> None:
        """One HTTP request's duration (a method outside :data:`HTTP_METHODS` is counted as ``_OTHER``)."""
        if method not in HTTP_METHODS:
            method = "_OTHER"
        key = ("h", method, route, status)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self.http.labels(method, route, str(status))
        child.observe(seconds)

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)
