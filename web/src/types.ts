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
  /** Each sink's deliveries of its results (issue 52; [] without sinks). */
  sinks?: JobSinkSummary[];
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
  /** A job with sinks: this row's delivery to each. */
  sinks?: SinkState[];
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

/** A score's (or a job row's) delivery to one sink (issue 52). */
export interface SinkState {
  type: string;
  state: "pending" | "sending" | "delivered" | "failed" | "skipped";
  attempts: number;
  error: string | null;
}

/** A job's deliveries to one of its sinks. */
export interface JobSinkSummary {
  type: string;
  url: string;
  name: string | null;
  delivered: number;
  pending: number;
  failed: number;
  skipped: number;
}

// The online evaluation shapes (rules, scores, traces, sessions, backfills) are in onlinetypes.ts.
