// The shapes of the /v1 answers the page reads (docs/api.md is the contract).

export type Language = "python" | "javascript" | "typescript";
export type Interface = "evaluate" | "legacy" | "main" | "metric";

export interface Settings {
  timeout_s?: number;
  memory_mb?: number;
  threshold?: number | null;
  correct_answer_key?: string;
  policy?: "standard" | "restricted";
}

export interface Case {
  inputs: unknown;
  outputs: unknown;
  trace?: unknown;
  app_params?: unknown;
}

export interface ErrorInfo {
  type: string;
  message: string;
  line: number | null;
  traceback?: string;
}

export interface EvaluationResult {
  status: string;
  score: number | null;
  passed: boolean | null;
  outputs: Record<string, number>;
  details: Record<string, unknown>;
  reason: string | null;
  label: string | null;
  error: ErrorInfo | null;
  warnings: string[];
  stdout: string;
  stderr: string;
  truncated: boolean;
  duration_ms: number;
  interface: Interface;
  runtime: { id: string; language: string; packages: Record<string, string>; policy?: string };
}

export interface Stats {
  mean: number | null;
  std: number | null;
  min: number | null;
  max: number | null;
  count: number;
  nan_count: number;
}

export interface Histogram {
  edges: number[];
  counts: number[];
  below: number;
  above: number;
}

export interface Aggregate {
  count: number;
  errors: number;
  score: Stats | null;
  outputs: Record<string, Stats>;
  pass_rate: number | null;
  labels: Record<string, number>;
  histogram?: Histogram | null;
}

export interface BatchResponse {
  results: EvaluationResult[];
  aggregate: Aggregate;
}

export type Capabilities = Record<string, { line: number; detail: string }[]>;

export interface Problem {
  type: string;
  message: string;
  line: number | null;
  column: number | null;
  package?: string | null;
}

export interface PinCheck {
  name: string;
  version: string;
  ok: boolean;
  normalized: string | null;
  message: string | null;
}

export interface Inspection {
  ok: boolean;
  interface: Interface | null;
  entrypoint: string | null;
  line: number | null;
  errors: Problem[];
  capabilities: Capabilities;
  pins: PinCheck[];
  policy: string | null;
  runtime: { id: string; built: boolean | null } | null;
  warnings: string[];
}

export interface Evaluator {
  id: string;
  name: string;
  description: string;
  revision: number;
  language: Language;
  interface: Interface;
  code: string;
  packages: Record<string, string>;
  settings: Settings;
  runtime_id: string;
  created_at: string;
  updated_at: string;
  capabilities: Capabilities;
  warnings: string[];
  fixtures: Fixture[];
  fixture_report?: FixtureReport | null;
  draft?: boolean;
}

export interface Fixture {
  name: string;
  inputs: unknown;
  outputs: unknown;
  trace?: unknown;
  expect: { score?: number | null; passed?: boolean | null; label?: string | null; status?: string | null; tolerance?: number };
}

export interface FixtureOutcome {
  name: string;
  passed: boolean;
  problems: string[];
  status: string;
  score: number | null;
  result_passed: boolean | null;
  label: string | null;
  error: string | null;
}

export interface FixtureReport {
  passed: number;
  failed: number;
  results: FixtureOutcome[];
}

export interface CompareSide {
  status: string;
  score: number | null;
  passed: boolean | null;
  label: string | null;
  error: string | null;
}

export interface CompareRow {
  index: number;
  flipped: boolean;
  fields: string[];
  base: CompareSide;
  head: CompareSide;
  delta: number | null;
}

export interface CompareResponse {
  evaluator_id: string;
  base_revision: number;
  head_revision: number;
  compared: number;
  flipped: number[];
  deltas: { pass_rate: number | null; mean_score: number | null; errors: number; flipped: Record<string, number> };
  base: Aggregate;
  head: Aggregate;
  rows: CompareRow[];
  next_offset: number | null;
}

export interface Page<T> {
  data: T[];
  count: number;
  next_cursor?: string | null;
}

export interface MigrateResponse {
  code: string;
  changed: boolean;
  interface_before: Interface;
  interface_after: Interface;
  diff: string;
  notes: { line: number | null; message: string }[];
  rules: string[];
  /** What the legacy code reads of a case (null: it was not legacy code). */
  reads?: MigrationReads | null;
}

export interface MigrationReads {
  output: boolean;
  correct_answer: boolean;
  app_params: string[];
}

export interface EvaluatorMigrateResponse extends MigrateResponse {
  compared: number;
  dry_run: boolean;
  saved: boolean;
  evaluator: Evaluator | null;
  warnings?: string[];
}

export interface Dataset {
  id: string;
  name: string;
  row_count: number;
  columns: string[];
  format: string;
  bytes: number;
  created_at: string;
}

export interface FieldMapping {
  outputs?: string | null;
  trace?: string | null;
  app_params?: string | null;
  inputs?: string[] | null;
}

export interface Job {
  id: string;
  evaluator_id: string;
  revision: number;
  status: "queued" | "running" | "succeeded" | "failed" | "cancelled" | "stopped";
  progress: { total: number; done: number; failed: number; cached?: number };
  rows_per_s: number | null;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  aggregate: Aggregate | null;
  error: { type: string; message: string; code?: string } | null;
  dataset_id: string;
  field_mapping: FieldMapping;
  /** The runtime (package set) the job's rows ran on: its lock is GET /v1/runtimes/{id}/lock. */
  runtime_id: string;
  warnings: string[];
  /** A model-target job's endpoint, as stored (the key's secret NAME, never its value). */
  target?: ModelTarget | null;
  /** A model-target job's calls, tokens and cost estimate so far. */
  usage?: TargetUsage | null;
}

/** ``target`` of POST /v1/jobs (docs/api.md, "Model targets"). */
export interface ModelTarget {
  base_url: string;
  model: string;
  prompt?: string | null;
  messages_column?: string | null;
  system?: string | null;
  api_key_secret?: string | null;
  temperature?: number | null;
  max_tokens?: number | null;
  concurrency?: number;
  timeout_s?: number;
  max_retries?: number;
  max_calls?: number | null;
  max_tokens_total?: number | null;
}

export interface TokenUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

export interface TargetUsage extends TokenUsage {
  calls: number;
  rows: number;
  cost_estimate: number | null;
}

/** A row's model call: what was sent, what came back (``text`` null and ``error`` set when it failed). */
export interface Generation {
  messages: { role: string; content: unknown }[];
  text: string | null;
  finish_reason: string | null;
  usage: TokenUsage;
  latency_ms: number;
  attempts: number;
  error: string | null;
}

/** POST /v1/results/replay: a stored row run again on its revision and runtime, compared. */
export interface Replay {
  job_id: string;
  index: number;
  evaluator_id: string;
  revision: number;
  runtime_id: string;
  identical: boolean;
  differences: string[];
  stored: EvaluationResult;
  replayed: EvaluationResult;
}

export interface JobResultItem {
  index: number;
  row: Record<string, unknown>;
  result: EvaluationResult;
  generation?: Generation;
}

export interface SecretName {
  name: string;
  created_at: string;
  updated_at: string;
}

export interface RowPage<T> {
  data: T[];
  offset: number;
  limit: number;
  next_offset: number | null;
  total: number;
}

// -- online evaluation (docs/online.md is the contract) --------------------------------------

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

export interface OnlineRule {
  id: string;
  name: string | null;
  evaluator_id: string;
  revision: number | null;
  filter: RuleFilter;
  sampling_rate: number;
  mapping: { inputs?: string | null; outputs?: string | null } | null;
  enabled: boolean;
  limits?: { scores_per_minute?: number | null; sandbox_seconds_per_hour?: number | null; model_calls_per_minute?: number | null } | null;
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
