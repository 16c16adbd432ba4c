"""Cross-request batching: concurrent requests that share a language pair and decoding options are decoded together.

One worker thread owns the model. Requests wait in a bounded queue, grouped by (language pair, options).
The worker takes the group of the oldest request once it holds ``max_batch_tokens`` source tokens or that
request has waited ``max_wait_ms`` (counted from when the worker was free to take it), and translates the whole
group in one :meth:`Translator.translate` call.
The model masks padding, so a request's translation does not depend on its batch mates.

Waiting only pays when batch mates are likely, so the oldest request waits only while traffic is concurrent:
when the previous batch held several requests, or the request arrived while the previous batch was being
decoded. A lone client's requests find neither and are decoded at once. Concurrent clients send their next
requests once answered, so the wait also ends as soon as as many requests are queued as were in flight
last time (the previous batch plus those that queued behind it): a batch of 32 answers comes back as one
batch, not split by whichever requests happened to arrive within ``max_wait_ms``.

Each request gets a :class:`concurrent.futures.Future`. Cancelling it (the client went away) removes the
request from the queue at once; a request whose deadline has passed is answered with
:class:`~serving.errors.RequestExpired` instead of being decoded.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import astuple, dataclass, field

from nmt.search import SearchOptions
from nmt.translator import Translation, Translator
from serving.config import BatchingConfig
from serving.errors import Overloaded, RequestExpired, ShuttingDown

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Job:
    """The validated work of one request: texts of one language pair, decoded with one set of options."""

    texts: tuple[str, ...]
    source_lang: str
    target_lang: str
    options: SearchOptions
    tokens: int  # source tokens over all texts, what the batch budget counts

    @property
    def batch_key(self) -> tuple:
        """Jobs with equal keys may share a decode call."""
        return self.source_lang, self.target_lang, astuple(self.options)


@dataclass
class Decoded:
    translations: list[Translation]  # one per text of the job, in order
    batch_requests: int  # requests decoded in the same call, for logs and metrics


@dataclass(eq=False)
class _Queued:
    job: Job
    deadline: float | None  # time.monotonic() after which nobody waits for the answer
    arrived: float = field(default_factory=time.monotonic)
    future: Future[Decoded] = field(default_factory=Future)


class Batcher:
    def __init__(self, translator: Translator, config: BatchingConfig):
        self.translator, self.config = translator, config
        self._changed = threading.Condition()
        self._groups: dict[tuple, deque[_Queued]] = {}
        self._queued = 0
        self._draining = False  # decode queued requests without waiting for batch mates
        self._closed = False  # refuse new requests; the worker stops once the queue is empty
        self._last_batch_requests = 0  # the worker's own state, for deciding whether to wait for batch mates
        self._in_flight = 0  # requests decoded last time plus those queued when that decode ended
        self._last_decode_end = -math.inf
        self._worker = threading.Thread(target=self._run, name="batcher", daemon=True)

    @property
    def queued(self) -> int:
        """Requests waiting to be decoded (not counting the batch being decoded)."""
        return self._queued

    def start(self) -> None:
        self._worker.start()

    def submit(self, job: Job, deadline: float | None = None) -> Future[Decoded]:
        """Queue a job; raises :class:`Overloaded` when the queue is full."""
        with self._changed:
            if self._closed:
                raise ShuttingDown("the server is shutting down; retry on another replica")
            if self._queued >= self.config.max_queued_requests:
                raise Overloaded(f"the server is busy: {self._queued} requests are queued, the limit is "
                                 f"{self.config.max_queued_requests}; retry later")
            item = _Queued(job, deadline)
            self._groups.setdefault(job.batch_key, deque()).append(item)
            self._queued += 1
            self._changed.notify()
        item.future.add_done_callback(lambda future: self._forget(item) if future.cancelled() else None)
        return item.future

    def drain(self) -> None:
        """Stop waiting for batch mates: during shutdown every queued request is decoded as soon as possible."""
        with self._changed:
            self._draining = True
            self._changed.notify()

    def close(self) -> None:
        """Refuse new requests, decode the queued ones and stop the worker."""
        with self._changed:
            self._draining = self._closed = True
            self._changed.notify()
        if self._worker.is_alive():
            self._worker.join()

    def _forget(self, item: _Queued) -> None:
        """A cancelled request gives its queue slot back at once."""
        with self._changed:
            group = self._groups.get(item.job.batch_key)
            if group is not None and item in group:
                group.remove(item)
                self._queued -= 1
                if not group:
                    del self._groups[item.job.batch_key]

    def _run(self) -> None:
        while (batch := self._next_batch()) is not None:
            self._decode(batch)

    def _next_batch(self) -> list[_Queued] | None:
        """Block until the oldest request's group is due, then take it; None once closed and empty."""
        with self._changed:
            while True:
                if not self._groups:
                    if self._closed:
                        return None
                    self._changed.wait()
                    continue
                key, group = min(self._groups.items(), key=lambda entry: entry[1][0].arrived)
                oldest = group[0]
                # The wait counts from when the worker could have taken the request: one that queued behind a
                # decode may still gather the batch mates that the decode's answers send back.
                due = max(oldest.arrived, self._last_decode_end) + self.config.max_wait_ms / 1000
                budget_filled = sum(item.job.tokens for item in group) >= self.config.max_batch_tokens
                concurrent = self._last_batch_requests > 1 or oldest.arrived < self._last_decode_end
                all_back = self._queued >= max(2, self._in_flight)
                if (self._draining or not self.config.enabled or not concurrent or budget_filled or all_back
                        or time.monotonic() >= due):
                    return self._take(key, group)
                self._changed.wait(due - time.monotonic())

    def _take(self, key: tuple, group: deque[_Queued]) -> list[_Queued]:
        """The oldest requests of a group within the token budget (always at least one)."""
        first = group.popleft()
        batch, tokens = [first], first.job.tokens
        while group and self.config.enabled and tokens + group[0].job.tokens <= self.config.max_batch_tokens:
            tokens += group[0].job.tokens
            batch.append(group.popleft())
        if not group:
            del self._groups[key]
        self._queued -= len(batch)
        return batch

    def _decode(self, batch: list[_Queued]) -> None:
        live = [item for item in batch if self._still_wanted(item)]
        if not live:
            return
        job = live[0].job
        texts = [text for item in live for text in item.job.texts]
        try:
            translations = self.translator.translate(texts, job.source_lang, job.target_lang, job.options)
        except Exception as error:  # the callers must hear about it; the worker must survive it
            logger.exception("decoding a batch of %d requests failed", len(live))
            for item in live:
                item.future.set_exception(error)
            return
        finally:  # before any answer goes out, so a client's next request counts as arriving after it
            with self._changed:
                self._last_batch_requests, self._last_decode_end = len(live), time.monotonic()
                self._in_flight = len(live) + self._queued
        position = 0
        for item in live:
            count = len(item.job.texts)
            item.future.set_result(Decoded(translations[position : position + count], len(live)))
            position += count

    @staticmethod
    def _still_wanted(item: _Queued) -> bool:
        """False for a cancelled or expired request, which is answered without being decoded."""
        if not item.future.set_running_or_notify_cancel():
            return False
        if item.deadline is not None and time.monotonic() >= item.deadline:
            item.future.set_exception(RequestExpired("the deadline passed while the request was queued"))
            return False
        return True
