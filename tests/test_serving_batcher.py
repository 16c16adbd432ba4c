"""The cross-request batcher on its own: grouping, budgets, cancellation, deadlines, overload, shutdown.

Jobs are queued before the worker starts, so which requests share a decode call is decided by the batcher's
rules alone, not by how fast the test submits them.
"""

import threading
import time
from concurrent.futures import CancelledError

import pytest

from nmt.search import SearchOptions
from serving.batcher import Batcher, Job
from serving.config import BatchingConfig
from serving.errors import Overloaded, RequestExpired, ShuttingDown

PATIENT = BatchingConfig(max_wait_ms=60_000)  # nothing is decoded before the budget fills or the batcher drains
SOURCES = ["나는 학생입니다.", "그는 커피를 마십니다. 비가 옵니다.", "감사합니다.", "오늘은 날씨가 좋습니다."]
TARGETS = ["I am a student.", "He drinks coffee. It is raining.", "Thank you.", "The weather is nice today."]


def job(text: str, options: SearchOptions | None = None, tokens: int = 10) -> Job:
    return Job((text,), "ko", "en", options or SearchOptions(), tokens)


@pytest.fixture
def make_batcher(fixture_translator):
    batchers = []

    def make(config: BatchingConfig = PATIENT, translator=fixture_translator) -> Batcher:
        batchers.append(Batcher(translator, config))
        return batchers[-1]

    yield make
    for batcher in batchers:
        batcher.close()


def decode_all(batcher: Batcher, jobs: list[Job]) -> list:
    futures = [batcher.submit(j) for j in jobs]
    batcher.start()
    batcher.drain()
    return [future.result(timeout=60) for future in futures]


@pytest.mark.parametrize("options", [SearchOptions(beam_size=1), SearchOptions(beam_size=4, nbest=2, return_attention=True)])
def test_batched_results_equal_unbatched_ones(make_batcher, fixture_translator, options):
    batched = decode_all(make_batcher(), [job(text, options) for text in SOURCES])
    alone = decode_all(make_batcher(BatchingConfig(enabled=False)), [job(text, options) for text in SOURCES])
    assert [d.batch_requests for d in batched] == [len(SOURCES)] * len(SOURCES)
    assert [d.batch_requests for d in alone] == [1] * len(SOURCES)
    for together, single, target in zip(batched, alone, TARGETS):
        (translation,), (reference,) = together.translations, single.translations
        assert translation.text == reference.text == target
        assert [c.text for c in translation.candidates] == [c.text for c in reference.candidates]
        # Padding is masked, but float sums over wider batches may round differently in the last digits.
        assert [c.score for c in translation.candidates] == pytest.approx([c.score for c in reference.candidates], abs=1e-4)
        if options.return_attention:
            assert translation.attention.target_tokens == reference.attention.target_tokens
            assert translation.attention.weights == [pytest.approx(row, abs=1e-4) for row in reference.attention.weights]


def test_requests_with_different_options_or_pairs_are_not_mixed(make_batcher):
    greedy, beam = SearchOptions(beam_size=1), SearchOptions(beam_size=2)
    jobs = [job(SOURCES[0], greedy), job(SOURCES[1], beam), job(SOURCES[2], greedy),
            Job(("I am a student.",), "en", "ko", greedy, 10)]
    decoded = decode_all(make_batcher(), jobs)
    assert [d.batch_requests for d in decoded] == [2, 1, 2, 1]
    assert [d.translations[0].text for d in decoded] == [TARGETS[0], TARGETS[1], TARGETS[2], "나는 학생입니다."]


def test_token_budget_bounds_a_batch(make_batcher):
    decoded = decode_all(make_batcher(BatchingConfig(max_batch_tokens=25, max_wait_ms=60_000)),
                         [job(text, tokens=10) for text in SOURCES])
    assert [d.batch_requests for d in decoded] == [2, 2, 2, 2]
    assert [d.translations[0].text for d in decoded] == TARGETS


def test_a_full_budget_is_decoded_without_waiting(make_batcher):
    batcher = make_batcher(BatchingConfig(max_batch_tokens=20, max_wait_ms=3_600_000))
    first = decode_all(batcher, [job(text, tokens=10) for text in SOURCES[:2]])  # traffic is now concurrent
    assert [d.batch_requests for d in first] == [2, 2]
    futures = [batcher.submit(job(text, tokens=10)) for text in SOURCES[2:]]
    assert [f.result(timeout=60).translations[0].text for f in futures] == TARGETS[2:]


def test_a_lone_request_is_decoded_without_waiting_for_batch_mates(make_batcher):
    batcher = make_batcher()  # would wait a minute for batch mates
    batcher.start()
    for text, target in zip(SOURCES, TARGETS):  # one client: each request follows the previous answer
        decoded = batcher.submit(job(text)).result(timeout=30)
        assert (decoded.batch_requests, decoded.translations[0].text) == (1, target)


class GatedTranslator:
    """Holds every decode until ``gate`` opens, so a test can queue requests behind a busy worker."""

    def __init__(self, translator):
        self.translator, self.gate, self.decoding = translator, threading.Event(), threading.Event()

    def translate(self, texts, source_lang, target_lang, options):
        self.decoding.set()
        self.gate.wait(timeout=60)
        return self.translator.translate(texts, source_lang, target_lang, options)


def test_a_request_that_queued_behind_a_decode_waits_for_batch_mates(make_batcher, fixture_translator):
    gated = GatedTranslator(fixture_translator)
    batcher = make_batcher(PATIENT, gated)
    batcher.start()
    first = batcher.submit(job(SOURCES[0]))
    assert gated.decoding.wait(timeout=30)
    queued = batcher.submit(job(SOURCES[1]))  # arrives while the worker is busy: traffic is concurrent
    gated.gate.set()
    assert first.result(timeout=30).batch_requests == 1
    time.sleep(0.2)  # were it not waiting, the queued request would be decoded alone by now
    assert not queued.done()
    mate = batcher.submit(job(SOURCES[2]))
    batcher.drain()
    assert [queued.result(timeout=30).batch_requests, mate.result(timeout=30).batch_requests] == [2, 2]
    assert [queued.result().translations[0].text, mate.result().translations[0].text] == TARGETS[1:3]


def test_the_wait_for_batch_mates_counts_from_the_end_of_the_decode_it_queued_behind(make_batcher, fixture_translator):
    gated = GatedTranslator(fixture_translator)
    batcher = make_batcher(BatchingConfig(max_wait_ms=1500), gated)
    batcher.start()
    first = batcher.submit(job(SOURCES[0]))
    assert gated.decoding.wait(timeout=30)
    queued = batcher.submit(job(SOURCES[1]))
    time.sleep(1.6)  # the queued request has now waited longer than max_wait_ms, all of it behind the decode
    gated.gate.set()
    assert first.result(timeout=30).batch_requests == 1
    time.sleep(0.1)
    assert not queued.done()  # it still waits for the batch mate the first answer may send back
    mate = batcher.submit(job(SOURCES[2]))
    assert [queued.result(timeout=30).batch_requests, mate.result(timeout=30).batch_requests] == [2, 2]


def test_the_wait_ends_once_as_many_requests_are_back_as_were_in_flight(make_batcher, fixture_translator):
    """One request decoded with two queued behind it: three clients. Their next three make a batch at once."""
    gated = GatedTranslator(fixture_translator)
    batcher = make_batcher(PATIENT, gated)  # would otherwise wait a minute for batch mates
    batcher.start()
    first = batcher.submit(job(SOURCES[0]))
    assert gated.decoding.wait(timeout=30)
    behind = [batcher.submit(job(text)) for text in SOURCES[1:3]]
    gated.gate.set()
    assert first.result(timeout=30).batch_requests == 1
    time.sleep(0.2)
    assert not any(f.done() for f in behind)  # two of the three clients are back: still waiting
    last = batcher.submit(job(SOURCES[3]))
    decoded = [f.result(timeout=30) for f in [*behind, last]]  # no drain: the third one completes the batch
    assert [d.batch_requests for d in decoded] == [3, 3, 3]
    assert [d.translations[0].text for d in decoded] == TARGETS[1:]


def test_multi_text_jobs_get_their_own_translations_back(make_batcher):
    decoded = decode_all(make_batcher(), [Job(tuple(SOURCES[:3]), "ko", "en", SearchOptions(), 30), job(SOURCES[3])])
    assert [t.text for t in decoded[0].translations] == TARGETS[:3]
    assert [t.text for t in decoded[1].translations] == TARGETS[3:]


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
    batcher.drain()
    assert kept.result(timeout=60).batch_requests == 2
    assert replacement.result(timeout=60).translations[0].text == TARGETS[2]
    with pytest.raises(CancelledError):
        dropped.result()


def test_an_expired_request_is_answered_without_decoding(make_batcher):
    batcher = make_batcher()
    expired = batcher.submit(job(SOURCES[0]), deadline=time.monotonic() - 1)
    live = batcher.submit(job(SOURCES[1]), deadline=time.monotonic() + 600)
    batcher.start()
    batcher.drain()
    with pytest.raises(RequestExpired):
        expired.result(timeout=60)
    assert live.result(timeout=60).batch_requests == 1
    assert live.result().translations[0].text == TARGETS[1]


def test_close_decodes_what_is_queued_then_refuses(make_batcher):
    batcher = make_batcher()
    futures = [batcher.submit(job(text)) for text in SOURCES]
    batcher.start()
    batcher.close()
    assert [f.result(timeout=0).translations[0].text for f in futures] == TARGETS
    with pytest.raises(ShuttingDown):
        batcher.submit(job(SOURCES[0]))


class FailingTranslator:
    def __init__(self, translator):
        self.translator = translator

    def translate(self, texts, source_lang, target_lang, options):
        if "boom" in texts:
            raise RuntimeError("decoder exploded")
        return self.translator.translate(texts, source_lang, target_lang, options)


def test_a_failed_decode_reaches_its_callers_and_the_worker_goes_on(make_batcher, fixture_translator):
    batcher = make_batcher(BatchingConfig(enabled=False), FailingTranslator(fixture_translator))
    failed, fine = batcher.submit(job("boom")), batcher.submit(job(SOURCES[0]))
    batcher.start()
    with pytest.raises(RuntimeError, match="decoder exploded"):
        failed.result(timeout=60)
    assert fine.result(timeout=60).translations[0].text == TARGETS[0]
