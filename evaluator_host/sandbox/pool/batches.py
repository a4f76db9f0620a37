"""One call's rows on one worker: the ``run`` frame of a batch, its replies, and what a lost worker means.

A *call* (:class:`Call`) is what :meth:`evaluator_host.sandbox.pool.workers.WorkerPool.run` was given: its rows,
their timeout, the frame's shape (a job's chunk: :class:`JobCases`), one outcome slot per row, and the
byte budget its replies may use up (:class:`ByteBudget`). The pool cuts it into batches and gives each
batch a worker; :func:`run_batch` sends the batch and reads its replies:

* every reply must carry the batch's request id and its index in the batch, else the worker is replaced
  and the row fails with ``ProtocolError`` (code that writes to the harness's channel reaches no request);
* a worker lost to a timeout, an exit, an output flood or a memory kill fails the row it was on, and
  the rest of the batch goes to a fresh worker — unless the harness may hold replies back
  (``flush_ms``) or runs rows at once (``in_flight``: an async evaluator), then
  :class:`~evaluator_host.sandbox.pool.replies.Unanswered` says how many rows are done;
* a ``memory_limit`` reply (the harness caught the allocation failing under its own address-space or
  heap limit, below the sandbox's) keeps the worker unless the reply says ``retire``;
* only a batch that finished cleanly (no frame after the last reply, no process left behind, no OOM
  kill during it) leaves its worker reusable.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from evaluator_host.errors import ResponseTooLarge
from evaluator_host.observability import tracing
from evaluator_host.sandbox.base import RawOutcome, Worker, WorkerSpec
from evaluator_host.sandbox.pool.leasing import Slot
from evaluator_host.sandbox.pool.replies import Foreign, Unanswered, bulk_outcomes, failure, hard_timeout
from evaluator_host.sandbox.protocol import FrameReader, FrameTooLarge, JobCases, WireCase, encode_frame

__all__ = ["FRAME_OVERHEAD", "ByteBudget", "Call", "frame_max", "run_batch", "send"]

FRAME_OVERHEAD = 64 * 1024


def frame_max(spec: WorkerSpec) -> int:
    """The largest reply frame a worker of ``spec`` may write (its output caps and result cap)."""
    return spec.output_limit * 2 + spec.result_limit + FRAME_OVERHEAD


def send(worker: Worker, data: bytes) -> None:
    """Write ``data`` to ``worker``'s channel; ``ConnectionResetError`` when the channel is closed already
    (a worker killed from outside whose pipe the loop has seen close: uvloop raises ``RuntimeError`` on
    such a write, asyncio drops it), so that every caller treats it as the dead worker it is."""
    if worker.writer.is_closing():
        raise ConnectionResetError("the worker's channel is closed")
    worker.writer.write(data)


@dataclass
class ByteBudget:
    """What the replies of one call may still add up to, in bytes (``left`` None: no bound)."""

    left: int | None

    def spend(self, size: int, index: int, total: int) -> None:
        """Count a reply of ``size`` bytes (for the call's row ``index`` of ``total``); past the budget,
        :class:`ResponseTooLarge` (the call stops there, its worker is discarded)."""
        if self.left is None:
            return
        self.left -= size
        if self.left < 0:
            raise ResponseTooLarge(
                f"the results of this call exceed max_response_bytes (EVALUATOR_HOST_MAX_RESPONSE_BYTES) "
                f"after {index + 1} of {total} cases; run them as a job (POST /v1/jobs), whose "
                "results are stored and read in pages"
            )


@dataclass
class Call:
    """One call's rows and what every batch of it shares; ``results`` fills in as its batches run."""

    spec: WorkerSpec
    cases: Sequence[WireCase]
    timeout_s: float
    correct_answer_key: str
    budget: ByteBudget = field(default_factory=lambda: ByteBudget(None))
    job_cases: JobCases | None = None  # the cases are a job's rows, sent as JobCases says
    results: list[RawOutcome | None] = field(init=False)

    def __post_init__(self) -> None:
        self.results = [None] * len(self.cases)

    def outcomes(self) -> list[RawOutcome]:
        return [r for r in self.results if r is not None]


async def run_batch(
    call: Call,
    batch: list[int],
    slot: Slot,
    *,
    request: str,
    release: Callable[[Slot, bool], Awaitable[None]],
    backend_name: str,
    flush_ms: float = 0.0,
    in_flight: int = 1,
) -> int:
    """Run the rows ``batch`` (indexes into ``call.cases``) on ``slot``'s worker as request ``request`` and
    ``release`` it after; return how many of the batch's rows now have an outcome. With ``flush_ms``, a
    worker lost to a timeout or an exit raises :class:`Unanswered` instead of blaming the next row (it
    may have died holding replies); so it does with ``in_flight`` > 1 (rows of an async evaluator running
    at once: the one that ended the worker may be any of them). Such a run's replies come no further
    apart than one row's timeout (a row starts once an earlier one is answered), and its harness
    answers a row's timeout itself: the host waits for each reply as for a soft timeout."""
    spec, results = call.spec, call.results
    if slot.load_error is not None:
        status = "timeout" if slot.load_error.get("type") == "Timeout" else "error"
        for index in batch:
            results[index] = RawOutcome(status=status, error=slot.load_error)
        await release(slot, status == "error")
        return len(batch)
    worker = slot.worker
    frames = FrameReader(worker.reader, frame_max(spec))
    done = 0
    healthy = False  # only a batch that finished cleanly leaves the worker reusable
    oom_before = slot.oom_seen
    span = tracing.start_span("worker.run", {"evaluator_host.backend": backend_name})
    try:
        run = {"op": "run", "id": request, "correct_answer_key": call.correct_answer_key, "timeout_s": call.timeout_s}
        if flush_ms:
            run["flush_ms"] = flush_ms
        if in_flight > 1:
            run["in_flight"] = in_flight
        sent = [call.cases[i] for i in batch]
        job_cases = call.job_cases
        send(worker, encode_frame({**run, "cases": sent}) if job_cases is None else job_cases.run_frame(run, sent))
        await worker.writer.drain()
        wait_s = hard_timeout(call.timeout_s, slot.soft_timeouts or in_flight > 1)
        while done < len(batch):
            index = batch[done]
            reply = await frames.next(wait_s)
            mark = None if worker.egress is None else worker.egress.mark()  # the connections this reply covers
            if reply.get("id") != request or reply.get("index") != done:
                raise Foreign(reply)
            call.budget.spend(frames.last_size, index, len(call.cases))
            if (behind := worker.raw_behind()) is not None:  # raw output written before the reply, still unread
                async with asyncio.timeout(wait_s):
                    await behind
            raw = worker.take_raw_output()
            egress: list[dict[str, Any]] = []
            if worker.egress is not None:
                await worker.egress.settle(mark)
                egress = worker.egress.take(mark)
            if reply.get("type") == "results":  # consecutive plain ok replies in one frame
                first = done
                done = bulk_outcomes(reply, batch, done, results)
                head = results[batch[first]]
                assert head is not None
                head.stderr, head.egress = raw, egress  # what arrived beside the frame: its first case's
                slot.uses += done - first
                continue
            results[index] = RawOutcome(
                status=reply.get("status", "invalid_result"),
                value=reply.get("value"),
                error=reply.get("error"),
                stdout=reply.get("stdout", ""),
                stderr=reply.get("stderr", "") + raw,
                truncated=bool(reply.get("truncated")),
                duration_ms=float(reply.get("duration_ms", 0.0)),
                egress=egress,
            )
            slot.uses += 1
            done += 1
            if reply.get("retire"):
                # the harness is leaving (process.exit, an untrusted event loop, a heap still near its
                # limit after a memory error): the rest of the batch goes to a fresh worker
                break
        else:
            # processes the batch started must not outlive it, whatever user code did to the harness;
            # nothing may follow the last reply (a frame written later belongs to no request)
            healthy = not frames.pending() and await worker.reap_strays()
            slot.oom_seen = worker.oom_kills()
            if slot.oom_seen > oom_before:  # cgroup v1 kills one process, maybe not the harness
                healthy = False
                message = f"a process of the worker exceeded memory_mb={spec.memory_mb} during this batch"
                for index in batch:
                    results[index] = failure("memory_limit", "MemoryLimit", message)
    except Foreign:
        await worker.kill()
        results[batch[done]] = failure(
            "error",
            "ProtocolError",
            "the worker sent a reply that belongs to no pending request (it was discarded, and the worker "
            "replaced: code that writes to the harness's channel cannot reach another request)",
        )
        done += 1
    except TimeoutError:
        await worker.kill()
        if flush_ms or in_flight > 1:
            raise Unanswered(done) from None
        results[batch[done]] = failure(
            "timeout",
            "Timeout",
            f"the evaluation exceeded timeout_s={call.timeout_s:g}",
            duration_ms=call.timeout_s * 1000.0,
        )
        done += 1
    except FrameTooLarge:
        await worker.kill()
        results[batch[done]] = failure("output_limit", "OutputLimit", "the worker's reply exceeded the output caps")
        done += 1
    except (asyncio.IncompleteReadError, ConnectionError, BrokenPipeError):
        info = await worker.kill()
        if flush_ms or in_flight > 1:
            raise Unanswered(done) from None
        if worker.output_overflow.is_set():
            results[batch[done]] = failure(
                "output_limit",
                "OutputLimit",
                f"output written to the raw stdout/stderr exceeded {spec.output_limit} bytes",
                truncated=True,
            )
        elif info.oom_killed:
            results[batch[done]] = failure(
                "memory_limit", "MemoryLimit", f"the worker exceeded memory_mb={spec.memory_mb}"
            )
        else:
            results[batch[done]] = failure(
                "error",
                "WorkerExited",
                f"the evaluator's process exited (code {info.returncode}) during the evaluation; "
                "the next evaluation gets a fresh worker",
                stderr=info.raw_output[-8192:],
            )
        done += 1
    finally:
        await release(slot, healthy)
        if span.is_recording():
            span.set_attributes({"evaluator_host.language": spec.load["language"], "evaluator_host.cases": done})
            tracing.finish(span, [r.status for i in batch[:done] if (r := results[i]) is not None], sys.exc_info()[1])
    return done
