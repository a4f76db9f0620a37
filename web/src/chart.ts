// A rule's scores over time, drawn as inline SVG (no chart library): the mean score as a line,
// the pass rate as bars, one column per time bucket of /v1/online-rules/{id}/stats. The same
// numbers are in a table under it (the accessible fallback), and the figure's aria-label says
// what it shows in one sentence.

import { h, num } from "./dom";
import type { RuleStats, StatsBucket } from "./onlinetypes";

const NS = "http://www.w3.org/2000/svg";
const W = 640;
const H = 200;
const PAD = { left: 36, right: 12, top: 12, bottom: 26 };

function svg(tag: string, attrs: Record<string, string | number>, ...children: (SVGElement | string)[]): SVGElement {
  const el = document.createElementNS(NS, tag);
  for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, String(value));
  for (const child of children) el.append(child);
  return el;
}

function clock(date: Date, bucket: number): string {
  const opts: Intl.DateTimeFormatOptions = bucket >= 86_400 ? { month: "short", day: "numeric" } : { hour: "2-digit", minute: "2-digit" };
  return date.toLocaleString(undefined, opts);
}

function count(n: number, what: string): string {
  return `${n} ${what}${n === 1 ? "" : "s"}`;
}

function percent(value: number | null): string {
  return value === null ? "—" : `${num(value * 100, 1)} %`;
}

/** The chart of ``stats`` (buckets oldest first, as the route answers them). */
export function statsChart(stats: RuleStats, title: string): HTMLElement {
  const buckets: StatsBucket[] = [...stats.buckets].sort((a, b) => Date.parse(a.start) - Date.parse(b.start));
  const scored = buckets.filter((b) => b.count > 0);
  if (!scored.length) {
    return h("figure", { class: "chart empty", "aria-label": `${title}: no scores in this range yet` }, h("p", { class: "muted" }, "No scores in this range yet: send traffic, the chart fills as traces are scored.", stats.queued ? ` ${stats.queued} waiting to be scored.` : ""));
  }
  const means = scored.map((b) => b.mean_score).filter((m): m is number => m !== null);
  const low = Math.min(0, ...means);
  const high = Math.max(1, ...means);
  const first = Math.min(Date.parse(stats.since), Date.parse(buckets[0].start));
  const last = Math.max(Date.parse(stats.until), Date.parse(buckets[buckets.length - 1].start) + stats.bucket_s * 1000);
  const span = Math.max(1, last - first);
  const innerW = W - PAD.left - PAD.right;
  const innerH = H - PAD.top - PAD.bottom;
  const x = (t: number) => PAD.left + ((t - first) / span) * innerW;
  const y = (v: number) => PAD.top + (1 - (v - low) / (high - low)) * innerH;
  const slot = Math.max(2, (stats.bucket_s * 1000 * innerW) / span);

  const grid = [low, (low + high) / 2, high].map((v) =>
    svg("g", { class: "chart-grid" }, svg("line", { x1: PAD.left, x2: W - PAD.right, y1: y(v), y2: y(v) }), svg("text", { x: PAD.left - 4, y: y(v) + 4, "text-anchor": "end" }, num(v, 2))),
  );
  const ticks = [buckets[0], buckets[Math.floor(buckets.length / 2)], buckets[buckets.length - 1]]
    .filter((b, i, all) => all.indexOf(b) === i)
    .map((b, i, all) => svg("text", { class: "chart-tick", x: x(Date.parse(b.start)) + slot / 2, y: H - 8, "text-anchor": i === 0 ? "start" : i === all.length - 1 ? "end" : "middle" }, clock(new Date(b.start), stats.bucket_s)));
  const bars = scored
    .filter((b) => b.pass_rate !== null)
    .map((b) => {
      const top = y(low + (b.pass_rate as number) * (high - low));
      return svg(
        "rect",
        { class: "chart-pass", x: x(Date.parse(b.start)) + slot * 0.15, width: slot * 0.7, y: top, height: Math.max(0, y(low) - top) },
        svg("title", {}, `${clock(new Date(b.start), stats.bucket_s)}: pass rate ${percent(b.pass_rate)} of ${b.count}`),
      );
    });
  const points = scored.filter((b) => b.mean_score !== null).map((b) => [x(Date.parse(b.start)) + slot / 2, y(b.mean_score as number), b] as const);
  const line = points.length > 1 ? svg("polyline", { class: "chart-mean", points: points.map(([px, py]) => `${px},${py}`).join(" ") }) : null;
  const dots = points.map(([px, py, b]) =>
    svg("circle", { class: "chart-dot", cx: px, cy: py, r: 3.5 }, svg("title", {}, `${clock(new Date(b.start), stats.bucket_s)}: mean ${num(b.mean_score)} (${b.count} scored, ${b.errors} errors)`)),
  );
  const total = scored.reduce((n, b) => n + b.count, 0);
  const withMean = scored.filter((b) => b.mean_score !== null);
  const overall = withMean.length ? withMean.reduce((s, b) => s + (b.mean_score as number) * b.count, 0) / withMean.reduce((n, b) => n + b.count, 0) : null;
  const errors = scored.reduce((n, b) => n + b.errors, 0);
  const latest = scored[scored.length - 1];
  const summary = `${title}: ${count(total, "score")} (${count(errors, "error")}) in ${scored.length} of ${count(buckets.length, "bucket")} of ${stats.bucket_s} s; mean score ${num(overall)}; latest bucket mean ${num(latest.mean_score)}, pass rate ${percent(latest.pass_rate)}`;
  const chart = svg(
    "svg",
    { viewBox: `0 0 ${W} ${H}`, class: "chart-svg", role: "img", "aria-label": summary, "data-points": points.length, "data-bars": bars.length },
    ...grid,
    ...bars,
    ...(line ? [line] : []),
    ...dots,
    ...ticks,
  );
  return h(
    "figure",
    { class: "chart", "aria-label": summary },
    chart,
    h("figcaption", { class: "chart-legend" }, h("span", { class: "key key-mean" }, "mean score"), h("span", { class: "key key-pass" }, "pass rate"), h("span", { class: "muted" }, ` · ${total} scored, ${count(errors, "error")}, ${stats.bucket_s} s buckets`, stats.queued ? ` · ${stats.queued} waiting` : "", stats.dropped ? ` · ${stats.dropped} dropped (backlog full)` : "")),
    h(
      "details",
      { class: "chart-table" },
      h("summary", {}, "as a table"),
      h(
        "table",
        { class: "stats-table" },
        h("thead", {}, h("tr", {}, ...["bucket", "count", "errors", "mean", "pass rate", "labels"].map((t) => h("th", {}, t)))),
        h(
          "tbody",
          {},
          scored.map((b) =>
            h(
              "tr",
              {},
              h("td", {}, new Date(b.start).toLocaleString()),
              h("td", { class: "num" }, String(b.count)),
              h("td", { class: "num" }, String(b.errors)),
              h("td", { class: "num" }, num(b.mean_score)),
              h("td", { class: "num" }, percent(b.pass_rate)),
              h("td", {}, Object.entries(b.labels ?? {}).map(([k, v]) => `${k}: ${v}`).join(", ") || "—"),
            ),
          ),
        ),
      ),
    ),
  );
}
