// Runs the built client's online methods (dist/index.js) against a running service: EVALUATOR_HOST_URL,
// EVALUATOR_HOST_API_KEY. Sends OTLP/JSON traces as an instrumented app does, then tries a rule, backfills
// one, reads a session and a trace's decisions. Prints one JSON line of what it saw;
// tests/client/test_typescript.py starts the service and checks it.
import { randomBytes } from "node:crypto";
import { EvaluatorHost, UnprocessableError } from "../dist/index.js";

const api = new EvaluatorHost();
const seen = {};
const hex = (n) => randomBytes(n).toString("hex");
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const CODE = "def evaluate(inputs, outputs, trace):\n    if inputs == 'boom':\n        raise ValueError('boom')\n    return {'score': 1.0, 'label': str(inputs)}\n";

/** One trace (root `chat`, child `llm` of OpenInference kind LLM) of `service`; its id. */
async function send(service, question, session) {
  const traceId = hex(16);
  const root = hex(8);
  const now = BigInt(Date.now()) * 1_000_000n;
  const attrs = (pairs) => Object.entries(pairs).map(([key, v]) => ({ key, value: { stringValue: v } }));
  const common = { "input.value": question, "output.value": question.toUpperCase(), ...(session ? { "session.id": session } : {}) };
  const span = (spanId, parent, name, extra) => ({
    traceId, spanId, ...(parent ? { parentSpanId: parent } : {}), name, kind: 1,
    startTimeUnixNano: String(now), endTimeUnixNano: String(now + 1000n), attributes: attrs({ ...common, ...extra }),
  });
  const body = {
    resourceSpans: [{
      resource: { attributes: attrs({ "service.name": service }) },
      scopeSpans: [{ scope: { name: "ts-client-test" }, spans: [span(hex(8), root, "llm", { "openinference.span.kind": "LLM" }), span(root, null, "chat", {})] }],
    }],
  };
  await api.request("POST", "/v1/traces", body);
  return traceId;
}

async function until(what, check, timeoutS = 60) {
  const deadline = Date.now() + timeoutS * 1000;
  for (;;) {
    const got = await check();
    if (got) return got;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

const evaluator = await api.createEvaluator({ name: "ts-online", language: "python", code: CODE });
const sessionRule = await api.createRule({ evaluator_id: evaluator.id, filter: { service_name: "ts-session" }, target: { level: "session", quiet_s: 1 } });
seen.sessionTarget = sessionRule.target;
const traces = [await send("ts-online", "hello"), await send("ts-online", "boom")];
const turns = [await send("ts-session", "hi", "ts-conv/1"), await send("ts-session", "bye", "ts-conv/1")];
await until("the traces routed", async () => {
  const states = new Map((await api.listTraces()).data.map((t) => [t.trace_id, t.state]));
  return [...traces, ...turns].every((t) => states.get(t) === "routed");
});

const tried = await api.testRule({ evaluator_id: evaluator.id, filter: { service_name: "ts-online", span_name: "llm" }, target: { level: "span" } });
seen.tried = [tried.matched, tried.results.map((r) => [r.status, r.span_id !== null, r.trace_id === traces[0] ? r.label : null]).sort()];
const none = await api.testRule({ evaluator_id: evaluator.id, filter: { service_name: "nothing-sends-this" } });
seen.none = [none.matched, none.results.length, typeof none.message === "string" && none.message.length > 0];
try {
  await api.testRule({ evaluator_id: evaluator.id, target: { level: "trace", quiet_s: 5 } });
} catch (exc) {
  seen.refused = exc instanceof UnprocessableError ? exc.status : String(exc);
}

const rule = await api.createRule({ evaluator_id: evaluator.id, filter: { service_name: "ts-online" }, limits: { scores_per_minute: 600 } });
seen.rule = [rule.target.level, rule.limits.scores_per_minute, rule.sinks];
const dry = await api.backfillDryRun(rule.id, { since: "2000-01-01T00:00:00Z" });
seen.dry = [dry.targets, dry.already_scored, dry.traces >= 2, dry.estimate_s >= 0];
const started = await api.startBackfill(rule.id, { since: "2000-01-01T00:00:00Z" });
const statuses = [];
const finished = await api.waitBackfill(rule.id, started.id, { pollS: 0.1, timeoutS: 120, onProgress: (b) => statuses.push(b.status) });
seen.backfill = [started.total, finished.status, finished.done, finished.failed, statuses.at(-1)];
seen.again = (await api.getBackfill(rule.id, started.id)).status;
seen.cancelled = (await api.cancelBackfill(rule.id, started.id)).status;

// a re-run answered from the result cache: a deterministic evaluator with the cache on, its second rule's backfill
const cachedEvaluator = await api.createEvaluator({ name: "ts-cached", language: "python", code: "def evaluate(inputs, outputs, trace):\n    return {'score': 1.0}\n", settings: { cache: true } });
const runs = [];
for (const _ of [0, 1]) {
  const each = await api.createRule({ evaluator_id: cachedEvaluator.id, filter: { service_name: "ts-online" } });
  const progress = [];
  const begun = await api.startBackfill(each.id, { since: "2000-01-01T00:00:00Z" });
  const ended = await api.waitBackfill(each.id, begun.id, { pollS: 0.1, timeoutS: 120, onProgress: (b) => progress.push(b.cached) });
  const cached = ended.cached; // typed: number, always sent
  runs.push([ended.status, ended.done, ended.skipped, cached, progress.at(-1)]);
  await api.deleteRule(each.id);
}
seen.cached = runs;
await api.deleteEvaluator(cachedEvaluator.id);

const scored = await until("the session scored", async () => {
  const session = await api.getSession("ts-conv/1");
  return session.scores.some((s) => s.state === "done") && session;
});
seen.session = [scored.num_traces, scored.messages.map((m) => m.content), scored.scores[0].session_id, scored.scores[0].current];
seen.listed = (await api.listSessions({ limit: 50 })).data.some((s) => s.session_id === "ts-conv/1");
const decisions = await api.traceDecisions(turns[0]);
seen.decision = decisions.some((d) => d.rule_id === sessionRule.id);
for (const id of [rule.id, sessionRule.id]) await api.deleteRule(id);
await api.deleteEvaluator(evaluator.id);
process.stdout.write(JSON.stringify(seen) + "\n");
