"""Online scoring's components in one service: the rule store, the queue, the API's reads, the
router, the scorer and the score exporter (``online/scoring/export.py``, when ``online_export_endpoint`` is set)
(``Services.online``); :meth:`OnlineScoring.start` after the service's start-up,
:meth:`OnlineScoring.close` before its database closes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy.engine import Engine

from evaluator_host.evaluation.caching.cache import ResultCache
from evaluator_host.evaluation.usecases import Components
from evaluator_host.observability.metrics import Metrics
from evaluator_host.online.backfill.runs import Backfiller
from evaluator_host.online.deciding.router import Router
from evaluator_host.online.scoring.export import ScoreExporter
from evaluator_host.online.scoring.scorer import Exporter, Scorer
from evaluator_host.store.online.decisions import DecisionStore
from evaluator_host.store.online.rules import RuleStore
from evaluator_host.store.online.scores import ScoreQueue
from evaluator_host.store.online.views import ScoreView
from evaluator_host.store.result_cache import ResultCacheStore

__all__ = ["OnlineScoring"]


class OnlineScoring:
    """Rules, queue, reads, router and scorer of one service (``me``: its service id)."""

    def __init__(
        self, components: Components, engine: Engine, metrics: Metrics, me: str, exporter: Exporter | None = None
    ) -> None:
        self._exporter: ScoreExporter | None = None
        if exporter is None:
            made = ScoreExporter(components.settings)  # a no-op unless online_export_endpoint is set
            exporter, self._exporter = (made if made.enabled else None), made
        self.rules = RuleStore(engine)
        self.queue = ScoreQueue(engine)
        self.views = ScoreView(engine)
        self.decisions = DecisionStore(engine)
        cache = ResultCache(components.settings, ResultCacheStore(engine))  # a backfill's re-runs are lookups
        self.scorer = Scorer(components, self.queue, me, metrics, exporter, cache)
        self.router = Router(components.settings, self.queue, metrics, self.scorer.wake)
        self.scorer.on_stored.append(self.router.ticker.nudge)  # the backlog figure is recounted after an idle spell
        self.backfiller = Backfiller(components.settings, self.queue, self.rules, me, self.scorer.wake, self.scorer)

    async def start(self) -> None:
        """Start routing and scoring (the scorer first puts back what a killed predecessor held)."""
        await self.scorer.start()
        self.router.start()
        await self.backfiller.start()

    async def close(self) -> None:
        """Stop both loops; claimed rows not finished are put back at the next start."""
        await self.backfiller.close()
        await self.router.close()
        await self.scorer.close()
        if self._exporter is not None:
            await asyncio.to_thread(self._exporter.shutdown)  # flushes what is queued, bounded

    def health(self) -> dict[str, Any]:
        """``/healthz``'s ``online``: the backlog (every service's, as last counted) and this process's drops."""
        return {"backlog": self.router.backlog, "dropped": self.router.dropped}
