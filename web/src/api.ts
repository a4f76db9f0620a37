// The one way the page talks to the service: same origin, /v1, the API key when one is set.

const KEY = "evaluator-host.api-key";

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    message: string,
    readonly body: Record<string, unknown>,
  ) {
    super(message);
  }
  get line(): number | null {
    return typeof this.body.line === "number" ? this.body.line : null;
  }
  get column(): number | null {
    return typeof this.body.column === "number" ? this.body.column : null;
  }
}

let unauthorized: () => void = () => undefined;

/** Called whenever the service answers 401 (the page then asks for a key). */
export function onUnauthorized(handler: () => void): void {
  unauthorized = handler;
}

export function apiKey(): string | null {
  return sessionStorage.getItem(KEY) ?? localStorage.getItem(KEY);
}

/** Keep ``key`` for this tab, or on this device when ``remember``; null forgets it. */
export function setApiKey(key: string | null, remember = false): void {
  sessionStorage.removeItem(KEY);
  localStorage.removeItem(KEY);
  if (key) (remember ? localStorage : sessionStorage).setItem(KEY, key);
}

function headers(contentType?: string): Headers {
  const out = new Headers({ accept: "application/json" });
  if (contentType) out.set("content-type", contentType);
  const key = apiKey();
  if (key) out.set("authorization", `Bearer ${key}`);
  return out;
}

async function failure(response: Response): Promise<ApiError> {
  let body: Record<string, unknown> = {};
  try {
    const parsed = (await response.json()) as { error?: Record<string, unknown> };
    body = parsed.error ?? {};
  } catch {
    body = {};
  }
  if (response.status === 401) unauthorized();
  const type = typeof body.type === "string" ? body.type : `HTTP ${response.status}`;
  const message = typeof body.message === "string" ? body.message : response.statusText || "request failed";
  return new ApiError(response.status, type, message, body);
}

/** ``method path`` with a JSON body (or ``raw``); the JSON answer, or ``ApiError`` with the error envelope. */
export async function api<T>(
  method: string,
  path: string,
  body?: unknown,
  options: { raw?: BodyInit; signal?: AbortSignal } = {},
): Promise<T> {
  let response: Response;
  try {
    response = await fetch(path, {
      method,
      headers: headers(body === undefined ? undefined : "application/json"),
      body: options.raw ?? (body === undefined ? undefined : JSON.stringify(body)),
      signal: options.signal,
    });
  } catch (exc) {
    if (exc instanceof DOMException && exc.name === "AbortError") throw exc;
    throw new ApiError(0, "NetworkError", "the service did not answer (is it running?)", {});
  }
  if (!response.ok) throw await failure(response);
  if (response.status === 204) return undefined as T;
  return (await response.json()) as T;
}

/** Fetch ``path`` (with the key) and save it as ``filename``. */
export async function download(path: string, filename: string): Promise<void> {
  const response = await fetch(path, { headers: headers() });
  if (!response.ok) throw await failure(response);
  const url = URL.createObjectURL(await response.blob());
  const link = Object.assign(document.createElement("a"), { href: url, download: filename });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/** A message for any failure, with the line and column when the service named them (once: a syntax
 * error's message already ends with "(line L, column C)", as the API words it). */
export function describe(exc: unknown): string {
  if (exc instanceof ApiError) {
    const said = /\(line \d+(, column \d+)?\)\s*($|;)/.test(exc.message) || /at line \d+, column \d+/.test(exc.message);
    const where = exc.line && !said ? ` (line ${exc.line}${exc.column ? `, column ${exc.column}` : ""})` : "";
    return `${exc.type}: ${exc.message}${where}`;
  }
  return exc instanceof Error ? exc.message : String(exc);
}
