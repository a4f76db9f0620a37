// The shapes of the online evaluation answers the page reads: rules, scores, traces, decisions, sessions,
// backfills and a rule's try (docs/online.md and docs/api.md are the contract).

import type { EvaluationResult, SinkState } from "./types";

export interface AttributeCondition {
  key: string;
  equals?: string | number | boolean | null;
  exists?: boolean | null;
}

export interface RuleFilter {
  service_name?: string | null;
  span_name?: string | null;
  attributes?: AttributeCondition[];
}

/** A rule's ``target``: a trace (the default), every matching span, or a session once quiet. */
export interface RuleTarget {
  level: "trace" | "span" | "session";
  session_key?: string | null;
  quiet_s?: number | null;
}

export interface RuleLimits {
  scores_per_minute?: number | null;
  sandbox_seconds_per_hour?: number | null;
  model_calls_per_minute?: number | null;
}

/** Where a rule's scores are also written (docs/online.md, "Sinks"). */
export interface Sink {
  type: "phoenix" | "langfuse" | "mlflow" | "otlp";
  url: string;
  name?: string | null;
  api_key?: string | null;
  public_key?: string | null;
  secret_key?: string | null;
  headers?: Record<string, string>;
}

export interface OnlineRule {
  id: string;
  name: string | null;
  evaluator_id: string;
  revision: number | null;
  filter: RuleFilter;
  sampling_rate: number;
  mapping: { inputs?: string | null; outputs?: string | null } | null;
  enabled: boolean;
  limits?: RuleLimits | null;
  /** What one score is of (absent on a service before issue 50: a trace). */
  target?: RuleTarget;
  sinks?: Sink[];
  created_at: string;
  updated_at: string;
}

export interface OnlineScore {
  rule_id: string;
  trace_id: string;
  span_id: string | null;
  state: "queued" | "running" | "done" | "dropped";
  status: string | null;
  score: number | null;
  passed: boolean | null;
  label: string | null;
  evaluator_id: string;
  revision: number | null;
  runtime_id: string | null;
  attempts?: number;
  enqueued_at: string;
  scored_at: string | null;
  duration_ms: number | null;
  result: EvaluationResult | null;
  target_id?: string | null;
  /** At session level: the scored session, its generation, and whether a later score superseded it. */
  session_id?: string | null;
  generation?: number | null;
  current?: boolean;
  superseded_by?: string | null;
  /** Its delivery to each sink of its rule (issue 52). */
  sinks?: SinkState[];
}

/** One span of the trace dict evaluators get (evaluation/trace_shape.py). */
export interface TraceSpan {
  trace_id: string;
  span_id: string;
  parent_id: string | null;
  name: string;
  kind: string;
  start_time: string;
  end_time: string;
  status_code: string;
  status_message: string;
  attributes: Record<string, unknown>;
  resource: Record<string, unknown>;
  events: { name: string; time: string; attributes: Record<string, unknown> }[];
  children: Record<string, TraceSpan>;
}

export interface TraceDict {
  trace_id: string;
  spans: Record<string, TraceSpan>;
}

/** An item of GET /v1/traces (the live feed). */
export interface TraceSummary {
  trace_id: string;
  state: string;
  service_name?: string | null;
  root_name?: string | null;
  span_count?: number;
  first_seen_at?: string;
  last_span_at?: string;
  scores: OnlineScore[];
}

/** Why a rule did or did not score a target of a trace (GET /v1/traces/{trace_id}'s decisions). */
export interface Decision {
  rule_id: string;
  target: string | null;
  decision: string;
  reason: string;
  at: string;
  until?: string | null;
  attempts: number;
}

/** GET /v1/traces/{trace_id}. */
export interface TraceDetail {
  trace_id: string;
  state: string;
  service_name?: string | null;
  root_span_id?: string | null;
  trace: TraceDict;
  inputs: unknown;
  outputs: unknown;
  scores: OnlineScore[];
  decisions?: Decision[];
}

export interface StatsBucket {
  start: string;
  count: number;
  ok: number;
  errors: number;
  mean_score: number | null;
  pass_rate: number | null;
  labels: Record<string, number>;
  decisions?: Record<string, number>;
}

/** GET /v1/online-rules/{id}/stats: buckets from since to until, empty ones included. */
export interface RuleStats {
  rule_id: string;
  since: string;
  until: string;
  bucket_s: number;
  buckets: StatsBucket[];
  queued: number;
  dropped: number;
  decisions?: Record<string, number>;
  pending?: Record<string, number>;
  pace?: {
    scores_last_minute: number;
    sandbox_seconds_last_hour: number;
    model_calls_last_minute?: number;
    running: number;
    concurrency?: number;
    concurrency_ceiling?: number;
    limits: Record<string, number>;
  };
}

/** One target scored by POST /v1/online-rules/test (nothing stored). */
export interface RuleTestResult {
  trace_id: string;
  span_id: string | null;
  session_id: string | null;
  status: string;
  score: number | null;
  passed: boolean | null;
  label: string | null;
  reason: string | null;
  inputs: unknown;
  outputs: unknown;
  duration_ms: number | null;
}

/** POST /v1/online-rules/test: ``matched`` 0 is no success (``message`` says what was looked at). */
export interface RuleTestAnswer {
  results: RuleTestResult[];
  matched: number;
  scanned_traces: number;
  message?: string | null;
}

/** POST /v1/online-rules/{id}/backfill with dry_run. */
export interface BackfillDryRun {
  traces: number;
  targets: number;
  already_scored: number;
  estimate_s: number;
  revision?: number | null;
}

/** A backfill (202, GET/DELETE /v1/online-rules/{id}/backfills/{backfill_id}). */
export interface Backfill {
  id: string;
  rule_id: string;
  status: "running" | "done" | "failed" | "cancelled";
  total: number;
  done: number;
  skipped: number;
  /** Of `done`, the targets answered from the result cache (no run); never part of `skipped`. */
  cached?: number;
  failed?: number;
  reason?: string | null;
  queued: number;
  cancelled: number;
  since: string | null;
  until: string | null;
  limit: number;
  revision: number | null;
  created_at: string;
}

/** An item of GET /v1/sessions. */
export interface SessionSummary {
  session_id: string;
  num_traces: number;
  first_seen_at: string;
  last_span_at: string;
}

/** GET /v1/sessions/{session_id}: the dict a session-level rule's evaluator gets, plus its scores. */
export interface SessionDetail {
  session_id: string;
  traces: TraceDict[];
  messages: { role?: string; content?: unknown; [key: string]: unknown }[];
  num_traces: number;
  duration_ms: number | null;
  truncated?: boolean;
  inputs: unknown;
  outputs: unknown;
  first_seen_at: string;
  last_span_at: string;
  scores: OnlineScore[];
}
