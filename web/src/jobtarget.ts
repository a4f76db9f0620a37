// A job's optional model target (docs/api.md, "Model targets"): the form that builds POST /v1/jobs's
// ``target`` (a Jinja2 prompt template with the dataset's columns as insertable chips, or a messages
// column; the key named by its workspace secret, never its value), and the views of what such a job
// used (calls, tokens, cost, its budgets, a stop) and of each row's generation.

import { api, describe } from "./api";
import { brief, fill, h, num, option } from "./dom";
import type { Generation, Job, ModelTarget, Page, SecretName } from "./types";

type Source = "prompt" | "messages";

/** Names a template can use as ``{{ name }}``: Jinja2 identifiers the template's context does not shadow. */
const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const RESERVED = new Set(["true", "false", "none", "True", "False", "None", "and", "or", "not", "in", "is", "if", "else", "range"]);

/** A field the person must fix: the message names it, ``field`` is marked invalid. */
export class TargetFormError extends Error {}

export class TargetForm {
  readonly element: HTMLElement;
  private columns: string[] = [];
  private source: Source = "prompt";
  private readonly enabled = h("input", { type: "checkbox", onchange: () => this.toggle() });
  private readonly body = h("div", { class: "target-form", hidden: true });
  private readonly baseUrl = input("base URL", "url", "http://localhost:8000/v1");
  private readonly model = input("model", "text", "gpt-4o-mini");
  private readonly prompt = h("textarea", { rows: 4, spellcheck: false, "aria-label": "prompt template", placeholder: "Q: {{ question }}" });
  private readonly chips = h("div", { class: "chips", "aria-label": "insert a column into the prompt" });
  private readonly messagesColumn = h("select", { "aria-label": "messages column" });
  private readonly system = h("textarea", { rows: 2, spellcheck: false, "aria-label": "system message", placeholder: "optional" });
  private readonly secret = h("select", { "aria-label": "API key secret" });
  private readonly secretHint = h("p", { class: "hint" });
  private readonly temperature = input("temperature", "number", "default", { min: 0, max: 2, step: 0.1 });
  private readonly maxTokens = input("max tokens", "number", "default", { min: 1, step: 1 });
  private readonly concurrency = input("concurrency", "number", "16", { min: 1, max: 1024, step: 1 });
  private readonly timeout = input("timeout (s)", "number", "60", { min: 0.1, max: 600, step: "any" });
  private readonly retries = input("retries", "number", "4", { min: 0, max: 10, step: 1 });
  private readonly maxCalls = input("max calls", "number", "no cap", { min: 1, step: 1 });
  private readonly maxTokensTotal = input("max tokens total", "number", "no cap", { min: 1, step: 1 });
  private readonly sourceBox = h("div");
  private readonly sourceTabs = h("div", { class: "tabs small", role: "radiogroup", "aria-label": "the user message comes from" });

  /** ``changed`` runs when the target is switched on or off (the outputs mapping depends on it). */
  constructor(private readonly changed: () => void = () => undefined) {
    fill(
      this.body,
      h("div", { class: "target-grid" }, field("base URL", this.baseUrl), field("model", this.model)),
      this.sourceTabs,
      this.sourceBox,
      field("system message", this.system),
      field("API key secret", this.secret),
      this.secretHint,
      h("div", { class: "target-grid numbers" }, field("temperature", this.temperature), field("max tokens", this.maxTokens), field("concurrency", this.concurrency), field("timeout (s)", this.timeout), field("retries", this.retries)),
      h("h4", {}, "Budgets (optional): the job stops once one is spent, keeping its rows"),
      h("div", { class: "target-grid numbers" }, field("max calls", this.maxCalls), field("max tokens total", this.maxTokensTotal)),
    );
    this.element = h(
      "div",
      { class: "target" },
      h("label", { class: "check" }, this.enabled, "Generate each row's outputs with a model (an OpenAI-compatible endpoint), then score them"),
      this.body,
    );
    this.renderSource();
    this.setSecrets([]);
  }

  /** Whether the job will have a target. */
  get on(): boolean {
    return this.enabled.checked;
  }

  /** The dataset's columns: the prompt's chips and the messages column's choices. */
  setColumns(columns: string[]): void {
    this.columns = columns;
    this.renderSource();
  }

  /** The workspace's secret names (GET /v1/secrets answers names and times, never values). */
  async refreshSecrets(): Promise<void> {
    try {
      this.setSecrets((await api<Page<SecretName>>("GET", "/v1/secrets")).data.map((s) => s.name));
    } catch (exc) {
      this.setSecrets([], `The secrets could not be listed: ${describe(exc)}`);
    }
  }

  /** Fill the form from a job's stored target (to run it again, on this or another dataset). */
  load(target: ModelTarget): void {
    this.enabled.checked = true;
    this.baseUrl.value = target.base_url;
    this.model.value = target.model;
    this.source = target.messages_column ? "messages" : "prompt";
    this.prompt.value = target.prompt ?? "";
    this.system.value = target.system ?? "";
    if (target.api_key_secret && ![...this.secret.options].some((o) => o.value === target.api_key_secret)) this.secret.append(option(target.api_key_secret, target.api_key_secret));
    this.secret.value = target.api_key_secret ?? "";
    const set = (el: HTMLInputElement, value: number | null | undefined) => (el.value = value === null || value === undefined ? "" : String(value));
    set(this.temperature, target.temperature);
    set(this.maxTokens, target.max_tokens);
    set(this.concurrency, target.concurrency);
    set(this.timeout, target.timeout_s);
    set(this.retries, target.max_retries);
    set(this.maxCalls, target.max_calls);
    set(this.maxTokensTotal, target.max_tokens_total);
    this.renderSource();
    if (target.messages_column) this.messagesColumn.value = target.messages_column;
    this.toggle();
  }

  /** The ``target`` to send, or ``TargetFormError`` naming the field to fix (marked invalid). */
  value(): ModelTarget {
    for (const el of this.body.querySelectorAll(".invalid")) el.classList.remove("invalid");
    const target: ModelTarget = { base_url: required(this.baseUrl, "base URL"), model: required(this.model, "model") };
    if (!/^https?:\/\/./i.test(target.base_url)) throw invalid(this.baseUrl, "base URL: give an http:// or https:// URL up to the API version, e.g. http://localhost:8000/v1");
    if (this.source === "prompt") target.prompt = required(this.prompt, "prompt template", false);
    else if (this.messagesColumn.value) target.messages_column = this.messagesColumn.value;
    else throw invalid(this.messagesColumn, "messages column: pick the dataset column that holds each row's messages");
    if (this.system.value.trim()) target.system = this.system.value;
    if (this.secret.value) target.api_key_secret = this.secret.value;
    const numbers: [keyof ModelTarget, HTMLInputElement, string, boolean][] = [
      ["temperature", this.temperature, "temperature", false],
      ["max_tokens", this.maxTokens, "max tokens", true],
      ["concurrency", this.concurrency, "concurrency", true],
      ["timeout_s", this.timeout, "timeout", false],
      ["max_retries", this.retries, "retries", true],
      ["max_calls", this.maxCalls, "max calls", true],
      ["max_tokens_total", this.maxTokensTotal, "max tokens total", true],
    ];
    for (const [key, el, what, integer] of numbers) {
      const value = numberOf(el, what, integer);
      if (value !== undefined) (target as unknown as Record<string, number>)[key] = value;
    }
    return target;
  }

  private toggle(): void {
    this.body.hidden = !this.enabled.checked;
    this.changed();
  }

  private setSecrets(names: string[], problem?: string): void {
    const chosen = this.secret.value;
    fill(this.secret, option("", "none (no Authorization header)"), names.map((n) => option(n, n, n === chosen)));
    fill(
      this.secretHint,
      problem ??
        (names.length
          ? "Its value is sent as Authorization: Bearer and is never shown, stored in rows or logged."
          : "No secrets in this workspace: set the key with PUT /v1/secrets/NAME {\"value\": …}, then pick its name here."),
    );
  }

  private renderSource(): void {
    const tab = (source: Source, label: string) =>
      h("button", { class: "tab", role: "radio", "aria-checked": String(this.source === source), onclick: () => { this.source = source; this.renderSource(); } }, label);
    fill(this.sourceTabs, tab("prompt", "prompt template"), tab("messages", "messages column"));
    if (this.source === "prompt") {
      fill(
        this.chips,
        this.columns.length ? h("span", { class: "muted" }, "insert ") : h("span", { class: "muted" }, "Pick a dataset to insert its columns."),
        this.columns.map((c) => {
          const usable = NAME.test(c) && !RESERVED.has(c);
          return h(
            "button",
            { class: "chip", disabled: !usable, title: usable ? `insert {{ ${c} }}` : `${c} is not a Jinja2 name: rename the column to use it in a template`, onclick: () => this.insert(`{{ ${c} }}`) },
            c,
          );
        }),
      );
      fill(this.sourceBox, field("prompt template", this.prompt), this.chips, h("p", { class: "hint" }, "Jinja2 (sandboxed) rendered from each row, sent as the user message; a row missing a column is an error result."));
    } else {
      const chosen = this.messagesColumn.value;
      fill(this.messagesColumn, option("", "—"), this.columns.map((c) => option(c, c, c === chosen)));
      fill(this.sourceBox, field("messages column", this.messagesColumn), h("p", { class: "hint" }, "A column holding an OpenAI messages list: [{\"role\": \"user\", \"content\": …}, …]."));
    }
  }

  /** Put ``text`` at the prompt's cursor (replacing a selection), then give it the focus back. */
  private insert(text: string): void {
    const el = this.prompt;
    el.setRangeText(text, el.selectionStart, el.selectionEnd, "end");
    el.focus();
  }
}

function input(label: string, type: string, placeholder: string, extra: Record<string, unknown> = {}): HTMLInputElement {
  return h("input", { type, placeholder, "aria-label": label, spellcheck: false, ...extra });
}

function field(label: string, control: HTMLElement): HTMLElement {
  return h("label", { class: "field" }, h("span", { class: "field-label" }, label), control);
}

function invalid(el: HTMLElement, message: string): TargetFormError {
  el.classList.add("invalid");
  el.focus();
  return new TargetFormError(message);
}

function required(el: HTMLInputElement | HTMLTextAreaElement, what: string, trim = true): string {
  const value = trim ? el.value.trim() : el.value;
  if (!value.trim()) throw invalid(el, `${what}: required for a model target`);
  return value;
}

function numberOf(el: HTMLInputElement, what: string, integer: boolean): number | undefined {
  if (el.validity.badInput) throw invalid(el, `${what}: not a number`);
  const raw = el.value.trim();
  if (!raw) return undefined;
  const value = Number(raw);
  if (!Number.isFinite(value) || (integer && !Number.isInteger(value))) throw invalid(el, `${what}: ${raw} is not ${integer ? "a whole number" : "a number"}`);
  return value;
}

function stat(key: string, label: string, value: string, title?: string, over = false): HTMLElement {
  return h("div", { class: `stat${over ? " bad" : ""}`, "data-usage": key, title }, h("span", { class: "stat-value" }, value), h("span", { class: "stat-label" }, label));
}

/** What a model-target job's endpoint is and what it used so far: calls, rows, tokens, cost, against its budgets. */
export function usageView(job: Job, reuse?: () => void): HTMLElement | null {
  const target = job.target;
  if (!target) return null;
  const usage = job.usage ?? { calls: 0, rows: 0, prompt_tokens: 0, completion_tokens: 0, total_tokens: 0, cost_estimate: null };
  const capped = (used: number, cap: number | null | undefined) => (cap ? `${used} / ${cap}` : String(used));
  const spent = (used: number, cap: number | null | undefined) => Boolean(cap && used >= cap);
  return h(
    "div",
    { class: "target-usage" },
    h(
      "p",
      { class: "target-line" },
      "Generated by ",
      h("b", {}, target.model),
      " at ",
      h("span", { class: "mono" }, target.base_url),
      ` · concurrency ${target.concurrency ?? 16}`,
      target.api_key_secret ? [" · key: secret ", h("span", { class: "mono" }, target.api_key_secret)] : " · no key",
      reuse ? h("button", { class: "small reuse", onclick: reuse }, "Use this target again") : null,
    ),
    h(
      "div",
      { class: "stats" },
      stat("calls", target.max_calls ? "model calls / cap" : "model calls", capped(usage.calls, target.max_calls), "calls sent, retries included", spent(usage.calls, target.max_calls)),
      stat("rows", "rows generated", `${usage.rows} / ${job.progress.total}`),
      stat("tokens", target.max_tokens_total ? "tokens / cap" : "tokens", capped(usage.total_tokens, target.max_tokens_total), `prompt ${usage.prompt_tokens} + completion ${usage.completion_tokens}`, spent(usage.total_tokens, target.max_tokens_total)),
      stat("prompt_tokens", "prompt · completion", `${usage.prompt_tokens} · ${usage.completion_tokens}`),
      stat("cost", "cost estimate", usage.cost_estimate === null ? "—" : num(usage.cost_estimate, 4), usage.cost_estimate === null ? `no price is configured for ${target.model} (EVALUATOR_HOST_TARGET_PRICES)` : "from the operator's prices per 1k tokens"),
    ),
  );
}

/** A job that ended ``stopped`` (a budget spent): why, and what it kept. */
export function stopView(job: Job): HTMLElement | null {
  if (job.status !== "stopped") return null;
  const { total, done } = job.progress;
  const budget = job.error?.code === "budget_exhausted";
  return h(
    "div",
    { class: "stop-box", role: "alert" },
    h("strong", {}, budget ? "Stopped: budget exhausted" : "Stopped"),
    job.error ? ` — ${job.error.message}` : "",
    h("p", {}, `${done} of ${total} rows have a result and are kept; ${total - done} were never generated (no result).`),
  );
}

/** A results-table cell: the row's generated text and its call (finish reason, tokens, latency), or why it failed. */
export function generationCell(generation: Generation | undefined): HTMLElement {
  if (!generation) return h("td", { class: "muted" }, "—");
  const g = generation;
  const meta = g.attempts
    ? [
        g.finish_reason ? `finish: ${g.finish_reason}` : null,
        `${g.usage.total_tokens} tokens (${g.usage.prompt_tokens} + ${g.usage.completion_tokens})`,
        `${num(g.latency_ms, 0)} ms`,
        g.attempts > 1 ? `${g.attempts} attempts` : null,
      ].filter((part): part is string => part !== null)
    : ["not sent to the model"];
  const sent = g.messages.map((m) => `${m.role}: ${typeof m.content === "string" ? m.content : JSON.stringify(m.content)}`).join("\n\n");
  const long = (g.text ?? "").length > 240;
  return h(
    "td",
    { class: "generation wide", "data-generation": g.error ? "error" : "ok" },
    g.error ? h("p", { class: "error-text" }, h("b", {}, "generation failed"), `: ${brief(g.error, 400)}`) : h("p", { class: "gen-text" }, brief(g.text ?? "", 240)),
    h("p", { class: "gen-meta muted" }, meta.join(" · ")),
    h("div", { class: "extras" }, long ? h("details", { class: "block" }, h("summary", {}, "full text"), h("pre", {}, g.text ?? "")) : null, g.messages.length ? h("details", { class: "block" }, h("summary", {}, "sent"), h("pre", {}, sent)) : null),
  );
}
