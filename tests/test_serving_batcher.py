"""The batcher on its own: joining and leaving a running search, budgets, cancellation, deadlines, overload, shutdown.

Nothing here depends on timing. Jobs are queued before the worker starts, or the test holds the worker at a
step boundary (:class:`SteppedTranslator`) and lets it take one step at a time; deadlines use a fake clock.
"""

import threading
from concurrent.futures import CancelledError

import pytest

from nmt.search import SearchOptions
from serving.batcher import Batcher, Job
from serving.config import BatchingConfig
from serving.errors import Overloaded, RequestExpired, ShuttingDown

TIMEOUT = 60
SOURCES = ["나는 학생입니다.", "그는 커피를 마십니다. 비가 옵니다.", "감사합니다.", "오늘은 날씨가 좋습니다."]
TARGETS = ["I am a student.", "He drinks coffee. It is raining.", "Thank you.", "The weather is nice today."]
# No full stops: one long, out-of-domain sentence that the model babbles on to its length limit.
LONG = "나는 학생입니다 그는 커피를 마십니다 오늘은 날씨가 좋습니다 감사합니다"


def job(text: str, options: SearchOptions | None = None, tokens: int = 10) -> Job:
    return Job((text,), "ko", "en", options or SearchOptions(), tokens)


class SteppedTranslator:
    """The fixture translator, whose searches step only when the test lets them.

    Before each step the worker reports that it is at a step boundary (every answer of the previous steps
    sent, queued requests taken in) and records how many sentences are searching, then waits for leave.
    """

    def __init__(self, translator):
        self.translator = translator
        self.at_boundary, self.allowed = threading.Semaphore(0), threading.Semaphore(0)
        self.searching: list[int] = []  # sentences in the search at each step
        self.free = False

    def __getattr__(self, name):
        return getattr(self.translator, name)

    def beam_search(self, options):
        search = self.translator.beam_search(options)
        step = search.step

        def stepped():
            self.searching.append(len(search))
            if not self.free:
                self.at_boundary.release()
                assert self.allowed.acquire(timeout=TIMEOUT)
            return step()

        search.step = stepped
        return search

    def wait_for_boundary(self) -> None:
        assert self.at_boundary.acquire(timeout=TIMEOUT), "the worker never reached a step boundary"

    def advance(self, steps: int = 1) -> None:
        """Let the worker take ``steps`` steps; returns when it waits at the next boundary (so the search still runs)."""
        for _ in range(steps):
            self.allowed.release()
            self.wait_for_boundary()

    def run_free(self) -> None:
        self.free = True
        self.allowed.release()


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def make_batcher(fixture_translator):
    batchers = []

    def make(config: BatchingConfig = BatchingConfig(), translator=fixture_translator, **kwargs) -> Batcher:
        batchers.append(Batcher(translator, config, **kwargs))
        return batchers[-1]

    yield make
    for batcher in batchers:
        if isinstance(batcher.translator, SteppedTranslator):
            batcher.translator.run_free()
        batcher.close()


@pytest.fixture
def stepped(fixture_translator) -> SteppedTranslator:
    return SteppedTranslator(fixture_translator)


def decode_all(batcher: Batcher, jobs: list[Job]) -> list:
    futures = [batcher.submit(j) for j in jobs]
    batcher.start()
    return [future.result(timeout=TIMEOUT) for future in futures]


def alone(translator, text: str, options: SearchOptions | None = None):
    return translator.translate([text], "ko", "en", options or SearchOptions())[0]


def assert_same_translation(translation, reference) -> None:
    assert translation.text == reference.text
    assert [c.text for c in translation.candidates] == [c.text for c in reference.candidates]
    assert [c.score for c in translation.candidates] == pytest.approx([c.score for c in reference.candidates], abs=1e-5)
    if reference.attention is not None:
        assert translation.attention.target_tokens == reference.attention.target_tokens
        assert translation.attention.weights == [pytest.approx(row, abs=1e-5) for row in reference.attention.weights]


@pytest.mark.parametrize("options", [SearchOptions(beam_size=1), SearchOptions(beam_size=4, nbest=2, return_attention=True),
                                     SearchOptions(beam_size=4, nbest=2, reconstruction_weight=0.5)])
def test_batched_results_equal_unbatched_ones(make_batcher, fixture_translator, options):
    batched = decode_all(make_batcher(), [job(text, options) for text in SOURCES])
    one_at_a_time = decode_all(make_batcher(BatchingConfig(enabled=False)), [job(text, options) for text in SOURCES])
    assert [d.batch_requests for d in batched] == [len(SOURCES)] * len(SOURCES)
    assert [d.batch_requests for d in one_at_a_time] == [1] * len(SOURCES)
    for together, single, text, target in zip(batched, one_at_a_time, SOURCES, TARGETS):
        reference = alone(fixture_translator, text, options)
        assert together.translations[0].text == target
        assert_same_translation(together.translations[0], reference)
        assert_same_translation(single.translations[0], reference)


def test_requests_with_different_options_or_pairs_are_not_mixed(make_batcher):
    greedy, beam = SearchOptions(beam_size=1), SearchOptions(beam_size=2)
    jobs = [job(SOURCES[0], greedy), job(SOURCES[1], beam), job(SOURCES[2], greedy),
            Job(("I am a student.",), "en", "ko", greedy, 10)]
    decoded = decode_all(make_batcher(), jobs)
    assert [d.batch_requests for d in decoded] == [2, 1, 2, 1]
    assert [d.translations[0].text for d in decoded] == [TARGETS[0], TARGETS[1], TARGETS[2], "나는 학생입니다."]


def test_requests_at_different_speech_levels_are_not_mixed(make_batcher, level_translator):
    levels = [None, "plain", "polite", "formal", "plain"]
    jobs = [Job(("I am a student.",), "en", "ko", SearchOptions(speech_level=level), 10) for level in levels]
    decoded = decode_all(make_batcher(translator=level_translator), jobs)
    assert [d.batch_requests for d in decoded] == [1, 2, 1, 1, 2]
    assert [d.translations[0].text for d in decoded] == ["나는 학생입니다.", "나는 학생이다.", "저는 학생이에요.",
                                                         "나는 학생입니다.", "나는 학생이다."]


def test_a_lone_request_is_decoded_without_waiting_for_batch_mates(make_batcher):
    batcher = make_batcher()
    batcher.start()
    for text, target in zip(SOURCES, TARGETS):  # one client: each request follows the previous answer
        decoded = batcher.submit(job(text)).result(timeout=TIMEOUT)
        assert (decoded.batch_requests, decoded.translations[0].text) == (1, target)


def test_a_request_joins_a_running_search_and_leaves_before_its_long_batch_mate(make_batcher, stepped, fixture_translator):
    batcher = make_batcher(translator=stepped)
    batcher.start()
    long = batcher.submit(job(LONG))
    stepped.wait_for_boundary()
    stepped.advance(2)
    short = batcher.submit(job(SOURCES[2]))
    stepped.advance()  # the step that the short request joins at
    assert stepped.searching[-1] == 2
    for _ in range(20):
        if short.done():
            break
        stepped.advance()
    assert short.done() and not long.done()
    assert short.result().batch_requests == 2
    assert_same_translation(short.result().translations[0], alone(fixture_translator, SOURCES[2]))
    assert stepped.searching[-1] == 1  # it left the search
    stepped.run_free()
    assert_same_translation(long.result(timeout=TIMEOUT).translations[0], alone(fixture_translator, LONG))


def test_a_cancelled_request_leaves_the_search_at_the_next_step(make_batcher, stepped, fixture_translator):
    batcher = make_batcher(translator=stepped)
    kept, cancelled = batcher.submit(job(LONG)), batcher.submit(job(LONG + " 비가 옵니다"))
    batcher.start()
    stepped.wait_for_boundary()
    stepped.advance(2)
    assert stepped.searching[-1] == 2
    assert cancelled.cancel()  # the client went away mid-search
    stepped.advance()
    assert stepped.searching[-1] == 1
    stepped.run_free()
    assert_same_translation(kept.result(timeout=TIMEOUT).translations[0], alone(fixture_translator, LONG))
    with pytest.raises(CancelledError):
        cancelled.result()


def test_a_deadline_that_passes_mid_search_is_answered_with_request_expired(make_batcher, stepped, fixture_translator):
    clock = FakeClock()
    batcher = make_batcher(translator=stepped, clock=clock)
    kept, impatient = batcher.submit(job(LONG)), batcher.submit(job(LONG + " 비가 옵니다"), deadline=10.0)
    batcher.start()
    stepped.wait_for_boundary()
    stepped.advance(2)
    assert not impatient.done() and stepped.searching[-1] == 2
    clock.now = 10.0
    stepped.advance()
    with pytest.raises(RequestExpired, match="deadline"):
        impatient.result(timeout=0)
    assert stepped.searching[-1] == 1
    stepped.run_free()
    assert_same_translation(kept.result(timeout=TIMEOUT).translations[0], alone(fixture_translator, LONG))


def test_an_expired_request_is_answered_without_decoding(make_batcher):
    clock = FakeClock()
    batcher = make_batcher(clock=clock)
    expired = batcher.submit(job(SOURCES[0]), deadline=-1.0)
    live = batcher.submit(job(SOURCES[1]), deadline=600.0)
    batcher.start()
    with pytest.raises(RequestExpired):
        expired.result(timeout=TIMEOUT)
    assert live.result(timeout=TIMEOUT).batch_requests == 1
    assert live.result().translations[0].text == TARGETS[1]


def test_the_token_budget_keeps_requests_queued_until_the_search_has_room(make_batcher, stepped):
    batcher = make_batcher(BatchingConfig(max_batch_tokens=1), stepped)  # room for one sentence at a time
    futures = [batcher.submit(job(text)) for text in SOURCES[:3]]
    batcher.start()
    stepped.wait_for_boundary()
    assert stepped.searching[-1] == 1 and batcher.queued == 2
    stepped.run_free()
    decoded = [f.result(timeout=TIMEOUT) for f in futures]
    assert [d.translations[0].text for d in decoded] == TARGETS[:3]
    assert set(stepped.searching) == {1}


def test_a_multi_sentence_text_is_answered_when_its_last_sentence_is_done(make_batcher, stepped, fixture_translator):
    """With room for one sentence at a time, the sentences of one text join the search one after the other."""
    batcher = make_batcher(BatchingConfig(max_batch_tokens=1), stepped)
    text = f"{SOURCES[1]} {SOURCES[0]}"
    stepped.run_free()
    decoded = decode_all(batcher, [Job((text, SOURCES[3], ""), "ko", "en", SearchOptions(nbest=2), 30)])[0]
    assert [t.text for t in decoded.translations] == [f"{TARGETS[1]} {TARGETS[0]}", TARGETS[3], ""]
    for translation, source in zip(decoded.translations, (text, SOURCES[3], "")):
        assert_same_translation(translation, alone(fixture_translator, source, SearchOptions(nbest=2)))


def test_with_batching_off_requests_are_decoded_one_at_a_time(make_batcher, stepped):
    batcher = make_batcher(BatchingConfig(enabled=False), stepped)
    futures = [batcher.submit(job(text)) for text in SOURCES]
    batcher.start()
    stepped.wait_for_boundary()
    assert batcher.queued == len(SOURCES) - 1
    stepped.run_free()
    assert [f.result(timeout=TIMEOUT).translations[0].text for f in futures] == TARGETS
    assert set(stepped.searching) <= {1, 2}  # the two sentences of SOURCES[1] search together


def test_a_full_queue_refuses_with_the_limit_in_the_message(make_batcher):
    batcher = make_batcher(BatchingConfig(max_queued_requests=2))
    batcher.submit(job(SOURCES[0]))
    batcher.submit(job(SOURCES[1]))
    with pytest.raises(Overloaded, match="2 requests are queued, the limit is 2"):
        batcher.submit(job(SOURCES[2]))


def test_a_cancelled_request_frees_its_slot_and_is_not_decoded(make_batcher):
    batcher = make_batcher(BatchingConfig(max_queued_requests=2))
    kept, dropped = batcher.submit(job(SOURCES[0])), batcher.submit(job(SOURCES[1]))
    assert dropped.cancel()
    assert batcher.queued == 1
    replacement = batcher.submit(job(SOURCES[2]))
    batcher.start()
    assert kept.result(timeout=TIMEOUT).batch_requests == 2
    assert replacement.result(timeout=TIMEOUT).translations[0].text == TARGETS[2]
    with pytest.raises(CancelledError):
        dropped.result()


def test_close_decodes_what_is_queued_then_refuses(make_batcher):
    batcher = make_batcher()
    futures = [batcher.submit(job(text)) for text in SOURCES]
    batcher.start()
    batcher.close()
    assert [f.result(timeout=0).translations[0].text for f in futures] == TARGETS
    with pytest.raises(ShuttingDown):
        batcher.submit(job(SOURCES[0]))


class FailingTranslator(SteppedTranslator):
    """The first search's first step raises, as a broken decoder would."""

    def __init__(self, translator):
        super().__init__(translator)
        self.free, self.failures = True, 1

    def beam_search(self, options):
        search = super().beam_search(options)
        step = search.step

        def failing():
            if self.failures:
                self.failures -= 1
                raise RuntimeError("decoder exploded")
            return step()

        search.step = failing
        return search


def test_a_failed_decode_reaches_its_callers_and_the_worker_goes_on(make_batcher, fixture_translator):
    batcher = make_batcher(BatchingConfig(enabled=False), FailingTranslator(fixture_translator))
    failed, fine = batcher.submit(job(SOURCES[1])), batcher.submit(job(SOURCES[0]))
    batcher.start()
    with pytest.raises(RuntimeError, match="decoder exploded"):
        failed.result(timeout=TIMEOUT)
    assert fine.result(timeout=TIMEOUT).translations[0].text == TARGETS[0]


def test_call_runs_on_the_worker_between_decoding_steps(make_batcher, stepped, fixture_translator):
    batcher = make_batcher(translator=stepped)
    batcher.start()
    long = batcher.submit(job(LONG))
    stepped.wait_for_boundary()
    called = batcher.call(lambda: (threading.current_thread().name, long.done()))
    stepped.advance()  # the boundary at which the call runs
    assert called.result(timeout=TIMEOUT) == ("batcher", False)
    stepped.run_free()
    assert_same_translation(long.result(timeout=TIMEOUT).translations[0], alone(fixture_translator, LONG))


def test_call_wakes_an_idle_worker_and_hands_back_errors(make_batcher):
    batcher = make_batcher()
    batcher.start()
    assert batcher.call(lambda: 42).result(timeout=TIMEOUT) == 42
    with pytest.raises(ZeroDivisionError):
        batcher.call(lambda: 1 / 0).result(timeout=TIMEOUT)
    assert batcher.call(lambda: "still serving").result(timeout=TIMEOUT) == "still serving"
    batcher.close()
    with pytest.raises(ShuttingDown):
        batcher.call(lambda: None)


def test_falling_idle_releases_freed_memory_at_most_once_per_interval(make_batcher):
    clock, released, ready = FakeClock(), [], threading.Semaphore(0)

    def release_memory():
        released.append(clock.now)
        ready.release()

    batcher = make_batcher(BatchingConfig(trim_interval_s=10), clock=clock, release_memory=release_memory)
    batcher.start()
    batcher.submit(job(SOURCES[0])).result(timeout=TIMEOUT)
    assert ready.acquire(timeout=TIMEOUT) and released == [0.0]
    clock.now = 5.0
    batcher.submit(job(SOURCES[1])).result(timeout=TIMEOUT)
    batcher.call(lambda: None).result(timeout=TIMEOUT)  # the worker has been idle since, and within the interval
    assert released == [0.0]
    clock.now = 11.0
    batcher.submit(job(SOURCES[2])).result(timeout=TIMEOUT)
    assert ready.acquire(timeout=TIMEOUT) and released == [0.0, 11.0]


def test_a_busy_worker_releases_freed_memory_between_steps_once_per_interval(make_batcher, stepped):
    """Under steady load the worker never falls idle; it trims between two steps of a running search instead."""
    clock, released = FakeClock(), []
    batcher = make_batcher(BatchingConfig(trim_interval_s=10), translator=stepped, clock=clock,
                           release_memory=lambda: released.append(clock.now))
    future = batcher.submit(job(LONG))
    batcher.start()
    stepped.wait_for_boundary()
    for now in (0.0, 4.0, 9.0, 10.0, 15.0, 21.0):
        clock.now = now
        stepped.advance()
    assert not future.done()
    assert released == [0.0, 10.0, 21.0]
