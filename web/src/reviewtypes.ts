// The review API's shapes (docs/api.md, "Review queues, verdicts and agreement"; issue 53).

/** Where a queue's items come from: one of rule_id and job_id (the other null). */
export interface QueueSource {
  rule_id?: string | null;
  job_id?: string | null;
}

/** Which answers a queue takes: exactly one condition. */
export interface QueueSelect {
  score_below?: number;
  score_above?: number;
  passed?: boolean;
  label_in?: string[];
  status_in?: string[];
}

/** GET /v1/review-queues/{id}: a queue and its progress. */
export interface ReviewQueue {
  id: string;
  name: string;
  evaluator_id: string;
  source: QueueSource;
  select: QueueSelect | null;
  sample: number;
  limit: number;
  items: number;
  reviewed: number;
  created_at: string;
  updated_at: string;
}

/** POST /v1/review-queues. */
export interface QueueCreate {
  name: string;
  source: QueueSource;
  select?: QueueSelect;
  sample?: number;
  limit?: number;
}

/** A person's verdict; ``current``: the one that counts (the others are its history). */
export interface Verdict {
  id: string;
  item_id: string;
  passed: boolean;
  score: number | null;
  label: string | null;
  note: string | null;
  reviewer: string | null;
  created_at: string;
  current: boolean;
}

/** One answer of the evaluator before people (GET /v1/review-queues/{id}/items). */
export interface ReviewItem {
  id: string;
  queue_id: string;
  state: "pending" | "reviewed";
  source: { rule_id?: string | null; target_id?: string | null; trace_id?: string | null; span_id?: string | null; job_id?: string | null; index?: number | null };
  evaluator_id: string;
  revision: number | null;
  status: string | null;
  score: number | null;
  passed: boolean | null;
  label: string | null;
  reason: string | null;
  inputs: unknown;
  outputs: unknown;
  trace: unknown;
  case_error: string | null;
  verdict: Verdict | null;
  added_at: string;
}

export interface ItemList {
  data: ReviewItem[];
  count: number;
  next_cursor: string | null;
}

/** GET /v1/evaluators/{id}/agreement: a revision against people's verdicts. */
export interface Agreement {
  evaluator_id: string;
  revision: number;
  reviewed: number;
  ran: number;
  cached: number;
  skipped: number;
  accuracy: number;
  cohen_kappa: number | null;
  cohen_kappa_reason: string | null;
  confusion: { tp: number; fp: number; fn: number; tn: number };
  evaluator_unanswered: number;
  score_mae: number | null;
  scored: number;
  spearman: number | null;
  spearman_reason: string | null;
  by_label: Record<string, { reviewed: number; accuracy: number; label_agreement: number | null }>;
}

/** POST /v1/review-queues/{id}/fixtures. */
export interface FixturesAdded {
  evaluator_id: string;
  revision: number;
  added: number;
  replaced: number;
  fixtures: number;
  disagreeing: string[];
}
