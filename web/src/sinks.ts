// Score sinks (issue 52): a score's or a job row's delivery to each sink as small badges — type and state,
// the attempts and the last error in the title (hover) — and a job's per-sink summary line.

import { h } from "./dom";
import type { Job, SinkState } from "./types";

const MARK: Record<string, string> = { delivered: "✓", failed: "✗", skipped: "–", pending: "…", sending: "…" };

/** One badge per sink (null when there is none). */
export function sinkBadges(sinks: SinkState[] | undefined | null): HTMLElement | null {
  if (!sinks?.length) return null;
  return h(
    "span",
    { class: "sinks", "aria-label": "delivery to the sinks" },
    sinks.map((s) => {
      const tries = `${s.attempts} attempt${s.attempts === 1 ? "" : "s"}`;
      const title = `${s.type}: ${s.state} (${tries})${s.error ? ` — ${s.error}` : ""}`;
      const tone = s.state === "delivered" ? "good" : s.state === "failed" ? "bad" : "";
      return h("span", { class: `badge sink ${tone}`, "data-sink": s.type, "data-sink-state": s.state, title }, `${s.type} ${MARK[s.state] ?? ""} ${s.state}`);
    }),
  );
}

/** A job's sinks: "langfuse facts: 3 delivered, 1 skipped" each (null without sinks). */
export function sinkSummary(job: Job): HTMLElement | null {
  if (!job.sinks?.length) return null;
  return h(
    "p",
    { class: "sink-summary", "aria-label": "sinks" },
    "Sinks: ",
    job.sinks.map((s, i) => {
      const counts = [`${s.delivered} delivered`, ...(["pending", "failed", "skipped"] as const).filter((k) => s[k]).map((k) => `${s[k]} ${k}`)];
      return h("span", { class: `sink-line${s.failed ? " fail" : ""}`, "data-sink": s.type, title: s.url }, `${i ? " · " : ""}${s.type}${s.name ? ` ${s.name}` : ""}: ${counts.join(", ")}`);
    }),
  );
}
