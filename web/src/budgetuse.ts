// A rule's budget use as the Online screen's rule row shows it (issue 51): from its /stats `pace`, each
// budget it has as "used/budget" — scores this minute, sandbox seconds this hour, model calls this minute
// (the egress proxy's count) — and its current pace when its judge's 429s slowed it down (its concurrency
// window below the ceiling). Null: no budget and not slowed (nothing to show).

import { num } from "./dom";
import type { RuleStats } from "./onlinetypes";

export function budgetUse(pace: RuleStats["pace"]): string | null {
  if (!pace) return null;
  const limits = pace.limits ?? {};
  const use = [
    limits.scores_per_minute ? `${pace.scores_last_minute ?? 0}/${limits.scores_per_minute} scores a minute` : "",
    limits.sandbox_seconds_per_hour ? `${num(pace.sandbox_seconds_last_hour ?? 0, 1)}/${limits.sandbox_seconds_per_hour} sandbox s an hour` : "",
    limits.model_calls_per_minute ? `${pace.model_calls_last_minute ?? 0}/${limits.model_calls_per_minute} model calls a minute` : "",
    pace.concurrency !== undefined && pace.concurrency_ceiling !== undefined && pace.concurrency < pace.concurrency_ceiling
      ? `slowed by its judge's 429s: ${pace.concurrency} rows at once`
      : "",
  ].filter(Boolean);
  return use.length ? use.join(" · ") : null;
}
