// Runs the built client (dist/index.js) against a running service: EVALUATOR_HOST_URL, EVALUATOR_HOST_API_KEY.
// Prints one JSON line of what it saw; tests/client/test_typescript.py starts the service and checks it.
import { AuthenticationError, EvaluatorHost, NotFoundError, ServiceUnreachable, UnprocessableError } from "../dist/index.js";

const api = new EvaluatorHost();
const seen = {};
const CODE = "def evaluate(inputs, outputs, trace):\n    return {'score': float(outputs == inputs['expected'])}\n";

seen.health = (await api.health()).status;
const one = await api.evaluate({ language: "typescript", code: "export function evaluate(i: any, o: string, t: any) { return o.length; }", outputs: "abcd" });
seen.ts = [one.status, one.score];
const evaluator = await api.createEvaluator({ name: "ts-client", language: "python", code: CODE });
const byId = await api.evaluateById(evaluator.id, { inputs: { expected: 1 }, outputs: 1 });
seen.byId = byId.score;
const rows = Array.from({ length: 40 }, (_, i) => ({ expected: i % 2, outputs: 0 }));
const dataset = await api.uploadDataset(rows, "ts-rows");
seen.rows = dataset.row_count;
const job = await api.startJob({ evaluator_id: evaluator.id, dataset_id: dataset.id });
const progress = [];
const done = await api.waitJob(job.id, { pollS: 0.2, timeoutS: 120, onProgress: (j) => progress.push(j.progress.done) });
seen.job = [done.status, done.progress.done, progress.at(-1)];
const scores = [];
for await (const result of api.iterResults(job.id, 15)) scores.push(result.result.score);
seen.results = [scores.length, scores.filter((s) => s === 1).length];
const v2 = await api.replaceEvaluator(evaluator.id, { name: "ts-client", language: "python", code: CODE.replace("float(", "1 - float("), fixtures: [{ name: "same", inputs: { expected: 1 }, outputs: 1, expect: { score: 0 } }] });
const compared = await api.compareRevisions(evaluator.id, { base_revision: 1, head_revision: v2.revision, cases: [{ inputs: { expected: 1 }, outputs: 1 }, { inputs: { expected: 1 }, outputs: 2 }] });
const tested = await api.testEvaluator(evaluator.id);
seen.fixtures = [compared.flipped, tested.passed, tested.failed];
try {
  await api.getEvaluator("ev_missing");
} catch (exc) {
  seen.notFound = exc instanceof NotFoundError ? [exc.status, exc.type] : String(exc);
}
try {
  await api.evaluate({ language: "python", code: "def evaluate(inputs, outputs, trace):\n    return (\n" });
} catch (exc) {
  seen.syntax = exc instanceof UnprocessableError ? [exc.status, exc.type, exc.line !== null] : String(exc);
}
try {
  await new EvaluatorHost({ apiKey: "" }).listJobs();
} catch (exc) {
  seen.noKey = exc instanceof AuthenticationError ? exc.status : String(exc);
}
try {
  await new EvaluatorHost({ baseUrl: process.argv[2] }).health();
} catch (exc) {
  seen.unreachable = exc instanceof ServiceUnreachable ? exc.message.includes(process.argv[2]) : String(exc);
}
await api.deleteEvaluator(evaluator.id);
process.stdout.write(JSON.stringify(seen) + "\n");
