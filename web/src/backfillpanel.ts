// A rule's backfill on the Online screen: since / until / limit, then the dry run's numbers (traces,
// targets, already scored, estimate: POST …/backfill with dry_run, nothing stored), then Start, then its
// live progress (GET …/backfills/{id} every POLL_MS while it runs and the screen is shown: scored, skipped,
// cached — answered from the result cache — and failed), and Cancel.
//
// A backfill that ended with every target failed is red with the service's reason; one that found
// nothing to score says so (never a green "done" of nothing).

import { api, describe } from "./api";
import { fill, h, num } from "./dom";
import type { Backfill, BackfillDryRun, OnlineRule } from "./onlinetypes";

const POLL_MS = 1000;

/** ``datetime-local``'s value (the browser's time zone) as ISO 8601, or undefined when empty. */
function iso(value: string): string | undefined {
  if (!value) return undefined;
  const at = new Date(value);
  return Number.isNaN(at.getTime()) ? undefined : at.toISOString();
}

function seconds(s: number): string {
  if (s < 1) return "under a second";
  if (s < 120) return `about ${num(s, 0)} s`;
  if (s < 7200) return `about ${num(s / 60, 0)} min`;
  return `about ${num(s / 3600, 1)} h`;
}

const KINDS: Record<Backfill["status"], string> = { running: "status-running", done: "status-ok", failed: "status-failed", cancelled: "status-queued" };

export class BackfillPanel {
  readonly element: HTMLElement;
  private readonly since = h("input", { type: "datetime-local", step: 1, "aria-label": "backfill since" });
  private readonly until = h("input", { type: "datetime-local", step: 1, "aria-label": "backfill until" });
  private readonly limit = h("input", { type: "number", min: 1, step: 1, "aria-label": "backfill limit", placeholder: "the setting's cap" });
  private readonly dryButton = h("button", { type: "button", class: "small", onclick: () => void this.dryRun() }, "Dry run");
  private readonly startButton = h("button", { type: "button", class: "small primary", disabled: true, onclick: () => void this.start() }, "Start backfill");
  private readonly cancelButton = h("button", { type: "button", class: "small danger", hidden: true, onclick: () => void this.cancel() }, "Cancel backfill");
  private readonly numbers = h("div", { class: "backfill-dry", "aria-label": "dry run", role: "status" });
  private readonly progress = h("div", { class: "backfill-progress", "aria-label": "backfill progress", "aria-live": "polite" });
  private readonly error = h("div", { class: "form-error", role: "alert" });
  private readonly url: { create: string; one: (id: string) => string };
  private backfill: Backfill | null = null;
  private timer: number | undefined;

  constructor(
    private readonly rule: OnlineRule,
    name: string,
    private readonly shown: () => boolean,
    onClose: () => void,
    private readonly onEnded: () => void = () => undefined,
  ) {
    const base = `/v1/online-rules/${encodeURIComponent(rule.id)}`;
    this.url = { create: `${base}/backfill`, one: (id: string) => `${base}/backfills/${encodeURIComponent(id)}` };
    for (const input of [this.since, this.until, this.limit]) input.addEventListener("input", () => this.invalidate());
    this.element = h(
      "section",
      { class: "panel backfill-panel", "data-rule": rule.id, "aria-label": `backfill of ${name}` },
      h("header", { class: "section-head" }, h("h3", {}, `Backfill · ${name}`), h("span", { class: "spacer" }), h("button", { type: "button", class: "small", "aria-label": "close the backfill", onclick: () => { this.stop(); onClose(); } }, "✕ Close")),
      h("p", { class: "hint" }, "Scores the stored traces this rule missed (first seen in the range); a target already scored with the revision is skipped. A dry run first: it counts, stores nothing."),
      h("div", { class: "form-grid" }, h("label", {}, "since ", this.since), h("label", {}, "until ", this.until), h("label", {}, "limit ", this.limit)),
      h("div", { class: "toolbar" }, this.dryButton, this.startButton, this.cancelButton),
      this.error,
      this.numbers,
      this.progress,
    );
  }

  private range(): Record<string, unknown> {
    const body: Record<string, unknown> = {};
    const since = iso(this.since.value);
    const until = iso(this.until.value);
    if (since) body.since = since;
    if (until) body.until = until;
    if (this.limit.value.trim()) body.limit = Number(this.limit.value);
    return body;
  }

  /** A changed range needs a new dry run before Start. */
  private invalidate(): void {
    if (this.backfill?.status === "running") return;
    this.startButton.disabled = true;
    fill(this.numbers);
  }

  private async dryRun(): Promise<void> {
    fill(this.error);
    this.startButton.disabled = true;
    try {
      const dry = await api<BackfillDryRun>("POST", this.url.create, { ...this.range(), dry_run: true });
      const toScore = Math.max(dry.targets - dry.already_scored, 0);
      const level = this.rule.target?.level;
      const cells: [string, string, string][] = [
        // at session level the dry run reads (and counts in `traces`) the sessions stored in the range
        ["traces", String(dry.traces), level === "session" ? "stored sessions in the range" : "stored traces in the range"],
        ["targets", String(dry.targets), level === "span" ? "matching spans" : level === "session" ? "matching sessions" : "matching traces"],
        ["already-scored", String(dry.already_scored), "already scored (skipped)"],
        ["to-score", String(toScore), "to score"],
        ["estimate", seconds(dry.estimate_s), "estimate"],
      ];
      fill(
        this.numbers,
        h("dl", { class: "dry-numbers" }, cells.flatMap(([key, value, label]) => [h("dt", {}, label), h("dd", { "data-key": key }, value)])),
        !dry.targets
          ? h("p", { class: "warn" }, `No stored ${level === "session" ? "session" : "trace"} in this range matches the rule: nothing to backfill.`)
          : !toScore
            ? h("p", { class: "warn" }, `Nothing to score: every matching target is already scored${dry.revision ? ` with revision ${dry.revision}` : ""}.`)
            : h("p", { class: "hint" }, `Start scores ${toScore} target(s)${dry.revision ? ` with revision ${dry.revision}` : ""}.`),
      );
      this.startButton.disabled = !toScore;
    } catch (exc) {
      fill(this.error, h("div", { class: "error-box" }, `Could not count the backfill: ${describe(exc)}`));
    }
  }

  private async start(): Promise<void> {
    fill(this.error);
    this.startButton.disabled = true;
    try {
      const started = await api<Backfill>("POST", this.url.create, this.range());
      this.numbers.querySelector("p")?.remove(); // "Start scores N target(s)": said, and done now
      this.show(started);
    } catch (exc) {
      fill(this.error, h("div", { class: "error-box" }, `Could not start the backfill: ${describe(exc)}`));
    }
  }

  private async cancel(): Promise<void> {
    if (!this.backfill) return;
    try {
      this.show(await api<Backfill>("DELETE", this.url.one(this.backfill.id)));
    } catch (exc) {
      fill(this.error, h("div", { class: "error-box" }, `Could not cancel the backfill: ${describe(exc)}`));
    }
  }

  private show(backfill: Backfill): void {
    const ended = this.backfill?.status === "running" && backfill.status !== "running";
    this.backfill = backfill;
    if (ended) this.onEnded(); // its scores are in: the feed, the chart and the counts show them
    const running = backfill.status === "running";
    this.cancelButton.hidden = !running;
    this.dryButton.disabled = running;
    const failed = backfill.failed ?? 0;
    const nothing = backfill.status === "done" && backfill.total === 0;
    const bar = h("progress", { max: Math.max(backfill.total, 1), value: backfill.done + backfill.cancelled });
    fill(
      this.progress,
      h(
        "div",
        { class: `backfill-state${backfill.status === "failed" ? " bad-box" : ""}`, "data-status": backfill.status, "data-backfill": backfill.id },
        h("span", { class: `badge ${nothing ? "status-queued" : KINDS[backfill.status]}` }, nothing ? "nothing to score" : backfill.status),
        " ",
        bar,
        " ",
        h(
          "span",
          { class: "backfill-counts" },
          h("span", { "data-key": "done" }, `${backfill.done}/${backfill.total} scored`),
          " · ",
          h("span", { "data-key": "skipped" }, `${backfill.skipped} skipped`),
          " · ",
          h("span", { "data-key": "cached", title: "of the scored, answered from the result cache (the same case seen before: no run)" }, `${backfill.cached ?? 0} cached`),
          failed ? " · " : "",
          failed ? h("span", { "data-key": "failed" }, `${failed} failed`) : "",
          backfill.cancelled ? ` · ${backfill.cancelled} cancelled` : "",
        ),
        backfill.reason ? h("p", { class: "error-text backfill-reason" }, backfill.reason) : null,
        backfill.status === "done" && failed ? h("p", { class: "warn" }, `${failed} of its ${backfill.done} target(s) failed: open their traces in the feed to see why.`) : null,
      ),
    );
    window.clearTimeout(this.timer);
    this.timer = running ? window.setTimeout(() => void this.poll(), POLL_MS) : undefined;
  }

  private async poll(): Promise<void> {
    this.timer = undefined;
    if (!this.backfill || !this.element.isConnected) return;
    if (!this.shown()) return; // resumed by resume() when the screen is shown again
    try {
      this.show(await api<Backfill>("GET", this.url.one(this.backfill.id)));
    } catch (exc) {
      fill(this.error, h("div", { class: "error-box" }, `Could not follow the backfill: ${describe(exc)}`));
    }
  }

  /** The screen is shown again: follow a running backfill again. */
  resume(): void {
    if (this.backfill?.status === "running" && this.timer === undefined) void this.poll();
  }

  stop(): void {
    window.clearTimeout(this.timer);
    this.timer = undefined;
  }
}
