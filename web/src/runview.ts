// The editor's run feedback: a package set's build followed from the runtime resource (its status and
// the end of its log, polled while the run waits), and a run's verdict (green only when a case answered).

import { ApiError, api } from "./api";
import { h, fill, num } from "./dom";
import type { Aggregate } from "./types";

const POLL_MS = 1000;
const LOG_LINES = 8;

interface RuntimeView {
  id: string;
  status: "building" | "ready" | "failed";
  elapsed_s: number | null;
  progress: { phase: string; done: number; total: number } | null;
  build_seconds: number | null;
  log_tail: string;
  error: { type: string; message: string } | null;
}

/** The last ``count`` non-empty lines of ``text``. */
export function lastLines(text: string, count = LOG_LINES): string {
  return text
    .split("\n")
    .filter((line) => line.trim())
    .slice(-count)
    .join("\n");
}

/** Where a build stands, as the runtime resource reports it: ``downloading 3/12``, ``resolving``, … */
export function phase(progress: RuntimeView["progress"]): string {
  if (!progress) return "installing";
  if (progress.phase === "downloading" && progress.total > 0) return `downloading ${progress.done}/${progress.total}`;
  return progress.phase;
}

/**
 * Follows ``GET /v1/runtimes/{id}`` while a run builds its package set: ``element`` shows the build's
 * status, elapsed time and the end of its log (live), and keeps the last log once the build ended.
 * ``stop()`` ends the polling (the run answered); a 404 (the build has not started yet) is waited out.
 */
export class BuildWatcher {
  readonly element = h("div", { class: "build-progress", "aria-live": "polite" });
  private timer: number | undefined;
  private stopped = false;
  private last: RuntimeView | null = null;

  constructor(private readonly runtimeId: string) {
    fill(this.element, h("p", { class: "muted" }, `Installing package set `, h("code", { class: "runtime-id" }, runtimeId), "…"));
    void this.poll();
  }

  private async poll(): Promise<void> {
    try {
      const view = await api<RuntimeView>("GET", `/v1/runtimes/${encodeURIComponent(this.runtimeId)}`);
      this.last = view;
      this.render(view);
      if (view.status !== "building") return; // ended: the run's answer follows
    } catch (exc) {
      if (!(exc instanceof ApiError) || exc.status !== 404) return; // not started yet: ask again
    }
    if (!this.stopped) this.timer = window.setTimeout(() => void this.poll(), POLL_MS);
  }

  private render(view: RuntimeView): void {
    const seconds = view.status === "building" ? view.elapsed_s : view.build_seconds;
    const state = view.status === "building" ? phase(view.progress) : view.status === "ready" ? "built" : "failed";
    const tail = lastLines(view.log_tail);
    fill(
      this.element,
      h("p", { class: `build-status build-${view.status}` }, `package set `, h("code", { class: "runtime-id" }, view.id), ` ${state}${seconds != null ? ` · ${num(seconds, 1)} s` : ""}`),
      tail ? h("pre", { class: "build-log", "aria-label": "build log (its end)" }, tail) : h("p", { class: "muted" }, "no build output yet"),
    );
  }

  /** The run answered: stop polling; read the runtime once more so the log shown is its last. */
  async stop(): Promise<void> {
    this.stopped = true;
    window.clearTimeout(this.timer);
    if (this.last?.status === "building" || this.last === null) {
      try {
        this.render(await api<RuntimeView>("GET", `/v1/runtimes/${encodeURIComponent(this.runtimeId)}`));
      } catch {
        // the run's own answer says what happened
      }
    }
  }
}

/** A run's verdict: ``done`` (green) when no case errored, ``mixed`` when some did, ``bad`` when all did. */
export function verdict(agg: Aggregate): { cls: "done" | "mixed" | "bad"; note: string } {
  if (agg.count > 0 && agg.errors >= agg.count) return { cls: "bad", note: agg.count === 1 ? " — the case errored" : ` — every case errored` };
  if (agg.errors > 0) return { cls: "mixed", note: ` — ${agg.errors} errored` };
  return { cls: "done", note: "" };
}
