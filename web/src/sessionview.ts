// Sessions on the Online screen: the workspace's sessions (GET /v1/sessions, first seen newest first) and
// one session (GET /v1/sessions/{id}): its scores by every session-level rule (a superseded one marked),
// its conversation as the evaluator gets it in trace["messages"], and its traces, each opening the
// trace view.

import { h, num, when } from "./dom";
import type { OnlineRule, SessionDetail, SessionSummary } from "./onlinetypes";
import { DEFAULT_SESSION_KEYS } from "./ruleform";
import { scoreCard } from "./traceview";

/** The attributes a trace's session id is read from: the rules' own keys, then the defaults. */
export function sessionKeys(rules: OnlineRule[]): string[] {
  const own = rules.map((r) => r.target?.session_key).filter((k): k is string => !!k);
  return [...new Set([...own, ...DEFAULT_SESSION_KEYS])];
}

function content(value: unknown): string {
  if (typeof value === "string") return value;
  return JSON.stringify(value) ?? "";
}

/** The sessions table's rows (``open`` opens one). */
export function sessionRows(sessions: SessionSummary[], openId: string | null, open: (id: string) => void): HTMLElement[] {
  if (!sessions.length) return [h("tr", {}, h("td", { colspan: 3, class: "muted" }, "No sessions yet: traces join one when a span carries session.id, gen_ai.conversation.id or langfuse.session.id (or a session-level rule's key)."))];
  return sessions.map((s) =>
    h(
      "tr",
      { tabindex: 0, class: s.session_id === openId ? "selected" : "", "data-session": s.session_id, onclick: () => open(s.session_id), onkeydown: (e: KeyboardEvent) => e.key === "Enter" && open(s.session_id) },
      h("td", { class: "mono" }, s.session_id),
      h("td", { class: "num" }, s.num_traces),
      h("td", { class: "muted", title: when(s.last_span_at) }, when(s.last_span_at)),
    ),
  );
}

/** One session's view; ``ruleName`` names a rule id, ``openTrace`` opens one of its traces. */
export function sessionView(detail: SessionDetail, ruleName: (id: string) => string, openTrace: (traceId: string) => void, onClose: () => void): HTMLElement {
  const scores = [...detail.scores].sort((a, b) => Number(b.current ?? true) - Number(a.current ?? true));
  return h(
    "section",
    { class: "panel session-view", "data-session": detail.session_id, "aria-label": "session" },
    h(
      "header",
      { class: "section-head" },
      h("h3", {}, "Session "),
      h("span", { class: "mono muted" }, detail.session_id),
      h("span", { class: "badge" }, `${detail.num_traces} trace(s)`),
      detail.duration_ms !== null ? h("span", { class: "muted" }, ` · ${num(detail.duration_ms / 1000, 1)} s`) : null,
      h("span", { class: "spacer" }),
      h("button", { class: "small", "aria-label": "close the session", onclick: onClose }, "✕ Close"),
    ),
    h("h4", {}, "Rules' scores of the session"),
    scores.length
      ? scores.map((s) => {
          const card = scoreCard(s, ruleName(s.rule_id));
          card.dataset.current = String(s.current ?? true);
          if (s.current === false) card.querySelector("header")?.append(h("span", { class: "badge superseded", title: `superseded by ${s.superseded_by ?? "a later score"}` }, `superseded (generation ${s.generation ?? "?"})`));
          else if (s.generation) card.querySelector("header")?.append(h("span", { class: "badge" }, `generation ${s.generation}`));
          return card;
        })
      : h("p", { class: "muted" }, "No session-level rule scored it yet (one scores a session once no span of it came for its quiet period)."),
    h("h4", {}, "Conversation (trace[\"messages\"])"),
    detail.messages.length
      ? h("ol", { class: "messages", "aria-label": "conversation" }, detail.messages.map((m) => h("li", { "data-role": String(m.role ?? "") }, h("b", {}, String(m.role ?? "message")), " ", h("span", { class: "message-content" }, content(m.content ?? m)))))
      : h("p", { class: "muted" }, "No messages: its traces carry no inputs/outputs the service recognizes."),
    h("h4", {}, detail.truncated ? `Traces (the latest ${detail.traces.length} of ${detail.num_traces})` : "Traces"),
    h(
      "ul",
      { class: "session-traces", "aria-label": "session traces" },
      detail.traces.map((t) => {
        const roots = Object.values(t.spans ?? {});
        return h("li", {}, h("button", { class: "link mono", "data-trace": t.trace_id, onclick: () => openTrace(t.trace_id) }, t.trace_id), roots[0] ? h("span", { class: "muted" }, ` ${roots[0].name} · ${when(roots[0].start_time)}`) : null);
      }),
    ),
  );
}
