// A typed client of the evaluator-host API for Node (18+: the global fetch, FormData and Blob).
// Types: src/schema.ts, generated from the service's OpenAPI document at build time (build.mjs).
// Errors: one tree rooted at ClientError, as the Python client's (docs/client.md): ApiError carries the
// status and the service's {type, message, line, column, ...}; ServiceUnreachable names the URL.
import type * as S from "./schema.js";

export type * from "./schema.js";

export class ClientError extends Error {}

/** No answer at all (refused, unresolvable, aborted). */
export class ServiceUnreachable extends ClientError {
  constructor(
    readonly url: string,
    cause: unknown,
  ) {
    super(`cannot reach the service at ${url}: ${cause instanceof Error ? cause.message : String(cause)}`);
  }
}

/** waitJob stopped waiting; the job goes on. */
export class JobWaitTimeout extends ClientError {
  constructor(readonly job: S.Job) {
    super(`job ${job.id} is still ${job.status}`);
  }
}

/** waitBackfill stopped waiting; the backfill goes on. */
export class BackfillWaitTimeout extends ClientError {
  constructor(readonly backfill: S.Backfill) {
    super(`backfill ${backfill.id} is still ${backfill.status} (${backfill.done}/${backfill.total})`);
  }
}

/** The service answered an error: `status` and its body's `type`, `message`, `line`, `column`. */
export class ApiError extends ClientError {
  readonly type: string;
  readonly line: number | null;
  readonly column: number | null;
  constructor(
    readonly status: number,
    readonly detail: Record<string, unknown>,
    readonly method: string,
    readonly url: string,
  ) {
    const type = typeof detail.type === "string" ? detail.type : `HTTP ${status}`;
    const message = typeof detail.message === "string" ? detail.message : "";
    super(`${method} ${url} answered ${status}: ${type}: ${message}`);
    this.type = type;
    this.line = typeof detail.line === "number" ? detail.line : null;
    this.column = typeof detail.column === "number" ? detail.column : null;
  }
}
export class BadRequestError extends ApiError {}
export class AuthenticationError extends ApiError {}
export class PermissionDenied extends ApiError {}
export class NotFoundError extends ApiError {}
export class ConflictError extends ApiError {}
export class MigrationMismatchError extends ConflictError {}
export class PayloadTooLarge extends ApiError {}
export class UnprocessableError extends ApiError {}
export class BuildFailedError extends UnprocessableError {}
export class RateLimitError extends ApiError {}
export class ServerError extends ApiError {}
export class ServiceUnavailable extends ServerError {}
export class StorageFullError extends ServerError {}

type ErrorClass = new (status: number, detail: Record<string, unknown>, method: string, url: string) => ApiError;
const BY_STATUS: Record<number, ErrorClass> = {
  400: BadRequestError,
  401: AuthenticationError,
  403: PermissionDenied,
  404: NotFoundError,
  409: ConflictError,
  413: PayloadTooLarge,
  422: UnprocessableError,
  429: RateLimitError,
  503: ServiceUnavailable,
  507: StorageFullError,
};
const BY_TYPE: Record<string, ErrorClass> = { MigrationMismatch: MigrationMismatchError, BuildError: BuildFailedError };

export const FINISHED = new Set(["succeeded", "failed", "cancelled", "stopped"]);

export interface Options {
  /** Default: EVALUATOR_HOST_URL, else http://127.0.0.1:8000. */
  baseUrl?: string;
  /** Default: EVALUATOR_HOST_API_KEY (none: an open service). "" sends no key. */
  apiKey?: string;
}

type Query = Record<string, string | number | boolean | null | undefined>;
type Definition = Omit<S.EvaluateRequest, "inputs" | "outputs" | "trace" | "app_params" | "cases">;
/** A backfill's range: `since`/`until` (ISO 8601) of the traces' first-seen times, at most `limit` targets. */
export type BackfillRange = Omit<S.BackfillCreate, "dry_run">;
type OneCase = Partial<Pick<S.Case, "inputs" | "outputs" | "trace" | "app_params">>;

/** The service's API: one method a route, typed with the service's own schemas. */
export class EvaluatorHost {
  readonly baseUrl: string;
  private readonly headers: Record<string, string>;

  constructor(options: Options = {}) {
    const env = (globalThis as { process?: { env: Record<string, string | undefined> } }).process?.env ?? {};
    this.baseUrl = (options.baseUrl ?? env.EVALUATOR_HOST_URL ?? "http://127.0.0.1:8000").replace(/\/+$/, "");
    const key = options.apiKey ?? env.EVALUATOR_HOST_API_KEY;
    this.headers = { accept: "application/json", ...(key ? { authorization: `Bearer ${key}` } : {}) };
  }

  /** `method path` with a JSON body (or a FormData); the parsed answer (undefined for 204). */
  async request<T>(method: string, path: string, body?: unknown, query: Query = {}): Promise<T> {
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null) params.set(k, String(v));
    const url = `${this.baseUrl}${path}${params.size ? `?${params}` : ""}`;
    const form = body instanceof FormData;
    let response: Response;
    try {
      response = await fetch(url, {
        method,
        headers: body === undefined || form ? this.headers : { ...this.headers, "content-type": "application/json" },
        body: body === undefined ? undefined : form ? body : JSON.stringify(body),
      });
    } catch (exc) {
      throw new ServiceUnreachable(this.baseUrl, (exc as { cause?: unknown }).cause ?? exc);
    }
    if (!response.ok) {
      const text = await response.text();
      let detail: Record<string, unknown>;
      try {
        detail = (JSON.parse(text) as { error: Record<string, unknown> }).error ?? {};
      } catch {
        detail = { type: `HTTP ${response.status}`, message: text.slice(0, 500) };
      }
      const cls = BY_TYPE[String(detail.type)] ?? BY_STATUS[response.status] ?? (response.status >= 500 ? ServerError : ApiError);
      throw new cls(response.status, detail, method, url);
    }
    if (response.status === 204) return undefined as T;
    return (await response.json()) as T;
  }

  health(): Promise<{ status: string; backend: string; isolation: string }> {
    return this.request("GET", "/healthz");
  }

  // evaluate
  evaluate(definition: Definition & OneCase): Promise<S.EvaluationResult> {
    return this.request("POST", "/v1/evaluate", definition);
  }
  evaluateCases(definition: Definition, cases: S.Case[]): Promise<S.BatchResponse> {
    return this.request("POST", "/v1/evaluate", { ...definition, cases });
  }
  evaluateById(evaluatorId: string, one: OneCase & { revision?: number } = {}): Promise<S.EvaluationResult> {
    return this.request("POST", `/v1/evaluators/${evaluatorId}/evaluate`, one);
  }
  evaluateCasesById(evaluatorId: string, cases: S.Case[], revision?: number): Promise<S.BatchResponse> {
    return this.request("POST", `/v1/evaluators/${evaluatorId}/evaluate`, { cases, revision });
  }

  // evaluators
  createEvaluator(body: S.EvaluatorCreate): Promise<S.Evaluator> {
    return this.request("POST", "/v1/evaluators", body);
  }
  replaceEvaluator(id: string, body: S.EvaluatorCreate): Promise<S.Evaluator> {
    return this.request("PUT", `/v1/evaluators/${id}`, body);
  }
  updateEvaluator(id: string, fields: S.EvaluatorPatch): Promise<S.Evaluator> {
    return this.request("PATCH", `/v1/evaluators/${id}`, fields);
  }
  getEvaluator(id: string): Promise<S.Evaluator> {
    return this.request("GET", `/v1/evaluators/${id}`);
  }
  listEvaluators(page: { limit?: number; cursor?: string } = {}): Promise<S.EvaluatorList> {
    return this.request("GET", "/v1/evaluators", undefined, page);
  }
  listRevisions(id: string): Promise<S.RevisionList> {
    return this.request("GET", `/v1/evaluators/${id}/revisions`);
  }
  deleteEvaluator(id: string): Promise<void> {
    return this.request("DELETE", `/v1/evaluators/${id}`);
  }

  // datasets
  /** Rows (sent as JSONL), or a file's text/bytes with its name (the suffix says JSONL, CSV or JSON). */
  uploadDataset(
    source: Record<string, unknown>[] | { filename: string; content: string | Uint8Array },
    name?: string,
  ): Promise<S.Dataset> {
    const file = Array.isArray(source)
      ? { filename: `${name ?? "rows"}.jsonl`, content: source.map((row) => JSON.stringify(row)).join("\n") + "\n" }
      : source;
    const form = new FormData();
    form.set("file", new Blob([file.content as BlobPart]), file.filename);
    return this.request("POST", "/v1/datasets", form, { name });
  }
  getDataset(id: string): Promise<S.Dataset> {
    return this.request("GET", `/v1/datasets/${id}`);
  }
  listDatasets(): Promise<S.DatasetList> {
    return this.request("GET", "/v1/datasets");
  }
  datasetRows(id: string, offset = 0, limit = 20): Promise<S.DatasetRowPage> {
    return this.request("GET", `/v1/datasets/${id}/rows`, undefined, { offset, limit });
  }
  deleteDataset(id: string): Promise<void> {
    return this.request("DELETE", `/v1/datasets/${id}`);
  }

  // jobs
  startJob(body: S.JobCreate): Promise<S.Job> {
    return this.request("POST", "/v1/jobs", body);
  }
  getJob(id: string, waitS?: number): Promise<S.Job> {
    return this.request("GET", `/v1/jobs/${id}`, undefined, { wait_s: waitS || undefined });
  }
  listJobs(): Promise<S.JobList> {
    return this.request("GET", "/v1/jobs");
  }
  cancelJob(id: string): Promise<S.Job> {
    return this.request("POST", `/v1/jobs/${id}/cancel`);
  }
  deleteJob(id: string): Promise<void> {
    return this.request("DELETE", `/v1/jobs/${id}`);
  }
  jobResults(id: string, offset = 0, limit = 100): Promise<S.JobResultPage> {
    return this.request("GET", `/v1/jobs/${id}/results`, undefined, { offset, limit });
  }
  /** The job once finished, by long polls of `pollS`; `onProgress(job)` when its status or counts changed. */
  async waitJob(
    id: string,
    options: { timeoutS?: number; pollS?: number; onProgress?: (job: S.Job) => unknown } = {},
  ): Promise<S.Job> {
    const pollS = options.pollS ?? 2;
    const deadline = options.timeoutS === undefined ? Infinity : Date.now() + options.timeoutS * 1000;
    let last: S.Job | undefined;
    for (;;) {
      const wait = Math.max(0, Math.min(pollS, (deadline - Date.now()) / 1000));
      const job = await this.getJob(id, wait);
      const changed = !last || last.status !== job.status || JSON.stringify(last.progress) !== JSON.stringify(job.progress);
      if (changed && options.onProgress) await options.onProgress(job);
      last = job;
      if (FINISHED.has(job.status)) return job;
      if (Date.now() >= deadline) throw new JobWaitTimeout(job);
    }
  }
  /** Every result in input order, a page at a time. */
  async *iterResults(id: string, pageSize = 100): AsyncGenerator<S.JobResult> {
    let offset: number | null | undefined = 0;
    while (offset !== null && offset !== undefined) {
      const page: S.JobResultPage = await this.jobResults(id, offset, pageSize);
      yield* page.data;
      offset = page.next_offset;
    }
  }

  // migration, runtimes
  migrate(body: S.MigrateRequest): Promise<S.MigrateResponse> {
    return this.request("POST", "/v1/migrate", body);
  }
  migrateEvaluator(id: string, body: S.EvaluatorMigrateRequest): Promise<S.EvaluatorMigrateResponse> {
    return this.request("POST", `/v1/evaluators/${id}/migrate`, body);
  }
  /** A revision's stored fixtures run now (``failed`` > 0 is an answer, not an error). */
  testEvaluator(id: string, body: S.EvaluatorTestRequest = {}): Promise<S.EvaluatorTestResponse> {
    return this.request("POST", `/v1/evaluators/${id}/test`, body);
  }
  /** Two revisions on the same rows: the flipped rows, the deltas, a page of the per-row table. */
  compareRevisions(id: string, body: S.CompareRequest): Promise<S.CompareResponse> {
    return this.request("POST", `/v1/evaluators/${id}/compare`, body);
  }
  buildRuntime(body: S.RuntimeCreate): Promise<S.RuntimeView> {
    return this.request("POST", "/v1/runtimes", body);
  }
  getRuntime(id: string): Promise<S.RuntimeView> {
    return this.request("GET", `/v1/runtimes/${id}`);
  }
  listRuntimes(): Promise<S.RuntimeList> {
    return this.request("GET", "/v1/runtimes");
  }

  // online rules and traces
  createRule(body: S.RuleCreate): Promise<S.Rule> {
    return this.request("POST", "/v1/online-rules", body);
  }
  getRule(id: string): Promise<S.Rule> {
    return this.request("GET", `/v1/online-rules/${id}`);
  }
  listRules(): Promise<S.RuleList> {
    return this.request("GET", "/v1/online-rules");
  }
  updateRule(id: string, fields: S.RulePatch): Promise<S.Rule> {
    return this.request("PATCH", `/v1/online-rules/${id}`, fields);
  }
  deleteRule(id: string): Promise<void> {
    return this.request("DELETE", `/v1/online-rules/${id}`);
  }
  ruleScores(id: string, query: { limit?: number; since?: string; until?: string } = {}): Promise<S.ScoreList> {
    return this.request("GET", `/v1/online-rules/${id}/scores`, undefined, query);
  }
  ruleStats(id: string, query: { bucket?: number; since?: string; until?: string } = {}): Promise<S.RuleStats> {
    return this.request("GET", `/v1/online-rules/${id}/stats`, undefined, query);
  }
  listTraces(): Promise<S.TraceList> {
    return this.request("GET", "/v1/traces");
  }
  getTrace(id: string): Promise<S.TraceDetail> {
    return this.request("GET", `/v1/traces/${id}`);
  }
  /** Why each rule did or did not score the trace (and, at span level, each span): its `decisions`. */
  async traceDecisions(id: string): Promise<S.Decision[]> {
    return (await this.getTrace(id)).decisions ?? [];
  }
  /** Try a rule's body before it goes live: scored now on the latest matching stored targets (at most
   * `limit`, default 20), nothing stored; nothing matched is `matched: 0` with a `message`, not a success. */
  testRule(body: S.RuleTest): Promise<S.RuleTestAnswer> {
    return this.request("POST", "/v1/online-rules/test", body);
  }
  /** What a backfill of `range` would do (traces, targets, already_scored, estimate_s), storing nothing. */
  backfillDryRun(ruleId: string, range: BackfillRange = {}): Promise<S.BackfillDryRun> {
    return this.request("POST", `/v1/online-rules/${encodeURIComponent(ruleId)}/backfill`, { ...range, dry_run: true });
  }
  /** Score the rule's stored traces of `range` it has not scored with its revision (202: follow it). */
  startBackfill(ruleId: string, range: BackfillRange = {}): Promise<S.Backfill> {
    return this.request("POST", `/v1/online-rules/${encodeURIComponent(ruleId)}/backfill`, { ...range, dry_run: false });
  }
  /** A backfill's progress: `running`, then `done`, `failed` (every target it scored failed: `reason`) or `cancelled`. */
  getBackfill(ruleId: string, backfillId: string): Promise<S.Backfill> {
    return this.request("GET", `/v1/online-rules/${encodeURIComponent(ruleId)}/backfills/${encodeURIComponent(backfillId)}`);
  }
  /** Cancel: its targets still queued are dropped, those running finish. */
  cancelBackfill(ruleId: string, backfillId: string): Promise<S.Backfill> {
    return this.request("DELETE", `/v1/online-rules/${encodeURIComponent(ruleId)}/backfills/${encodeURIComponent(backfillId)}`);
  }
  /** The backfill once no longer `running` (polled every `pollS`); `onProgress` when its status or a count (done, total, skipped, cached, failed) changed. */
  async waitBackfill(
    ruleId: string,
    backfillId: string,
    options: { timeoutS?: number; pollS?: number; onProgress?: (backfill: S.Backfill) => unknown } = {},
  ): Promise<S.Backfill> {
    const deadline = options.timeoutS === undefined ? Infinity : Date.now() + options.timeoutS * 1000;
    let last = "";
    for (;;) {
      const backfill = await this.getBackfill(ruleId, backfillId);
      const seen = JSON.stringify([backfill.status, backfill.done, backfill.total, backfill.skipped, backfill.cached, backfill.failed]);
      if (seen !== last && options.onProgress) await options.onProgress(backfill);
      last = seen;
      if (backfill.status !== "running") return backfill;
      if (Date.now() >= deadline) throw new BackfillWaitTimeout(backfill);
      await new Promise((resolve) => setTimeout(resolve, (options.pollS ?? 1) * 1000));
    }
  }
  /** The workspace's sessions (traces grouped by a session id), first seen newest first. */
  listSessions(page: { limit?: number; cursor?: string } = {}): Promise<S.SessionList> {
    return this.request("GET", "/v1/sessions", undefined, page);
  }
  /** One session: the dict a session-level rule's evaluator gets (traces, messages) and its scores. */
  getSession(id: string): Promise<S.SessionDetail> {
    return this.request("GET", `/v1/sessions/${encodeURIComponent(id)}`);
  }

  // secrets; workspaces and keys (the operator key)
  putSecret(name: string, value: string): Promise<void> {
    return this.request("PUT", `/v1/secrets/${name}`, { value });
  }
  listSecrets(): Promise<S.SecretList> {
    return this.request("GET", "/v1/secrets");
  }
  deleteSecret(name: string): Promise<void> {
    return this.request("DELETE", `/v1/secrets/${name}`);
  }
  createWorkspace(name: string): Promise<S.Workspace> {
    return this.request("POST", "/v1/workspaces", { name });
  }
  listWorkspaces(): Promise<S.WorkspaceList> {
    return this.request("GET", "/v1/workspaces");
  }
  updateWorkspace(id: string, fields: S.WorkspacePatch): Promise<S.Workspace> {
    return this.request("PATCH", `/v1/workspaces/${id}`, fields);
  }
  createKey(workspaceId: string, name = "key"): Promise<S.ApiKeyCreated> {
    return this.request("POST", `/v1/workspaces/${workspaceId}/keys`, { name });
  }
  listKeys(workspaceId?: string): Promise<S.ApiKeyList> {
    return this.request("GET", "/v1/keys", undefined, { workspace_id: workspaceId });
  }
  revokeKey(id: string): Promise<void> {
    return this.request("DELETE", `/v1/keys/${id}`);
  }
}
