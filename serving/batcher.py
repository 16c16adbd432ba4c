"""Cross-request batching at the decoding step: requests join a running beam search and leave it once translated.

One worker thread owns the model. Requests wait in a bounded queue, grouped by (language pair, options); each
group being decoded has one :class:`~nmt.continuous.ContinuousTranslation`. At every step boundary the worker
moves queued requests into their group's search while it has room (``max_batch_tokens``), advances every
running search by one token, and answers each request at the step its last sentence finishes. So a short
request does not wait for a long batch mate, and a new request does not wait for a batch to finish: it joins at
the next step. Nobody waits for batch mates either: a lone request is decoded at once. The model masks padding
and every sentence counts its own positions, so a request's translation does not depend on its batch mates.

Each request gets a :class:`concurrent.futures.Future`, which stays pending until answered. Cancelling it (the
client went away) removes the request from the queue at once, or from its search at the next step boundary; a
request whose deadline has passed is answered with :class:`~serving.errors.RequestExpired`, queued or mid-search.
With batching off the worker decodes one request at a time (its own sentences still together).

Every search has new shapes, and glibc keeps the freed buffers in its heap, scattered between live ones; the
worker returns them to the OS at a step boundary every ``trim_interval_s``, busy or falling idle, so the
resident memory of a long-running server follows its load instead of its history.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import astuple, dataclass, field

from nmt.continuous import ContinuousTranslation
from nmt.memory import release_free_memory
from nmt.search import SearchOptions
from nmt.translator import Translation, Translator
from serving.config import BatchingConfig
from serving.errors import Overloaded, RequestExpired, ShuttingDown
from serving.threads import AdaptiveThreads

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
    batch_requests: int  # the most requests decoded alongside it (itself included), for logs and metrics


@dataclass(eq=False)
class _Queued:
    job: Job
    deadline: float | None  # clock() after which nobody waits for the answer
    arrived: float
    future: Future[Decoded] = field(default_factory=Future)


class Batcher:
    """The queue and the worker thread; ``clock`` (``time.monotonic``) is what deadlines are compared with.

    With ``threads`` the worker adapts its decoding threads to what other processes leave of the CPUs;
    ``release_memory`` is what it calls between steps, once per ``trim_interval_s``.
    """

    def __init__(self, translator: Translator, config: BatchingConfig, clock: Callable[[], float] = time.monotonic,
                 threads: AdaptiveThreads | None = None, release_memory: Callable[[], None] = release_free_memory):
        self.translator, self.config, self.clock, self.threads = translator, config, clock, threads
        self.release_memory, self._released_at = release_memory, -float("inf")
        self._changed = threading.Condition()
        self._groups: dict[tuple, deque[_Queued]] = {}
        self._queued = 0
        self._closed = False  # refuse new requests; the worker stops once nothing is queued or running
        self._running: dict[tuple, ContinuousTranslation] = {}  # the worker's own: one search per group
        self._calls: deque[tuple[Callable[[], object], Future]] = deque()  # see call()
        self._worker = threading.Thread(target=self._run, name="batcher", daemon=True)

    @property
    def queued(self) -> int:
        """Requests waiting to join a search (not counting those being decoded)."""
        return self._queued

    def start(self) -> None:
        self._worker.start()

    def submit(self, job: Job, deadline: float | None = None) -> Future[Decoded]:
        """Queue a job; raises :class:`Overloaded` when the queue is full."""
        with self._changed:
            if self._closed:
                raise ShuttingDown()
            if self._queued >= self.config.max_queued_requests:
                raise Overloaded(f"the server is busy: {self._queued} requests are queued, the limit is "
                                 f"{self.config.max_queued_requests}; retry later")
            item = _Queued(job, deadline, self.clock())
            self._groups.setdefault(job.batch_key, deque()).append(item)
            self._queued += 1
            self._changed.notify()
        item.future.add_done_callback(lambda future: self._forget(item) if future.cancelled() else None)
        return item.future

    def call(self, function: Callable[[], object]) -> Future:
        """Run ``function`` on the worker thread between two decoding steps; its future gets the result or error.

        For work that needs the model to itself, such as explaining a translation (serving.http): it runs
        serialised with decoding, on the thread whose OpenMP pool decodes. Not counted against the queue bound.
        """
        future: Future = Future()
        with self._changed:
            if self._closed:
                raise ShuttingDown()
            self._calls.append((function, future))
            self._changed.notify()
        return future

    def close(self) -> None:
        """Refuse new requests, decode the queued ones and stop the worker."""
        with self._changed:
            self._closed = True
            self._changed.notify()
        if self._worker.is_alive():
            self._worker.join()

    def _forget(self, item: _Queued) -> None:
        """A cancelled request gives its queue slot back at once (one being decoded leaves at the next step)."""
        with self._changed:
            group = self._groups.get(item.job.batch_key)
            if group is not None and item in group:
                group.remove(item)
                self._queued -= 1
                if not group:
                    del self._groups[item.job.batch_key]

    def _run(self) -> None:
        while self._admit():
            if self.threads is not None:
                self.threads.adjust()
            self._run_calls()
            for key, search in list(self._running.items()):
                self._step(search)
                if not search:
                    del self._running[key]
            if self.clock() - self._released_at >= self.config.trim_interval_s:
                self.release_memory()
                self._released_at = self.clock()

    def _admit(self) -> bool:
        """At a step boundary: move queued requests into the searches, or block until there are some; False once closed and idle."""
        with self._changed:
            while True:
                self._take_queued()
                if self._running or self._calls:
                    return True
                if self._closed and not self._groups:
                    return False
                self._changed.wait()

    def _run_calls(self) -> None:
        with self._changed:
            calls, self._calls = self._calls, deque()
        for function, future in calls:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(function())
                except Exception as error:  # the caller hears about it; the worker survives it
                    future.set_exception(error)

    def _take_queued(self) -> None:
        """Oldest first, each group's requests join its search while it has room; with batching off, one request at a time."""
        for key, group in sorted(self._groups.items(), key=lambda entry: entry[1][0].arrived):
            while group and not (self._running and not self.config.enabled):
                search = self._running.get(key)
                if search is not None and search.full:
                    break
                item = group.popleft()
                self._queued -= 1
                if self._still_wanted(item):
                    if search is None:
                        job = item.job
                        search = self._running[key] = ContinuousTranslation(
                            self.translator, job.source_lang, job.target_lang, job.options, self.config.max_batch_tokens)
                    try:
                        search.add(item, item.job.texts)
                    except Exception as error:  # the caller must hear about it; the worker must survive it
                        logger.exception("a request could not join its search")
                        self._answer(item, error=error)
            if not group:
                del self._groups[key]

    def _step(self, search: ContinuousTranslation) -> None:
        """Drop requests nobody waits for, advance the search by one token, answer the requests it finished."""
        for item in search.keys:
            if not self._still_wanted(item):
                search.remove(item)
        try:
            finished = search.step()
        except Exception as error:  # the callers must hear about it; the worker must survive it
            logger.exception("decoding %d requests failed", len(search))
            for item in search.keys:
                search.remove(item)
                self._answer(item, error=error)
            return
        for done in finished:
            self._answer(done.key, Decoded(done.translations, done.company))

    @staticmethod
    def _answer(item: _Queued, result: Decoded | None = None, error: Exception | None = None) -> None:
        """Send the result (or the error) unless the request was cancelled meanwhile."""
        if item.future.set_running_or_notify_cancel():
            if error is None:
                item.future.set_result(result)
            else:
                item.future.set_exception(error)

    def _still_wanted(self, item: _Queued) -> bool:
        """False for a cancelled request, or an expired one, which is then answered with RequestExpired."""
        if item.future.cancelled():
            return False
        if item.deadline is not None and self.clock() >= item.deadline:
            self._answer(item, error=RequestExpired("the deadline passed before the translation was done"))
            return False
        return True
