"""The gRPC server end to end, in-process on a free loopback port, with the tiny fixture model on the CPU."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import math
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from nmt.search import SearchOptions
from nmt.sentences import split_sentences
from serving import client
from serving.config import BatchingConfig, Limits, ServerConfig
from serving.observability import JsonFormatter
from serving.server import StartupError, TranslationServer, load_translator, parse_args
from serving.stubs import translator_pb2 as pb
from serving.stubs import translator_pb2_grpc
from serving.validation import RequestValidator

PAIRS = [line.split("\t") for line in (Path(__file__).parent / "fixtures" / "tiny.tsv").read_text("utf-8").splitlines() if line]
KO, EN = [ko for ko, _ in PAIRS], [en for _, en in PAIRS]
SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
TIMEOUT = 60  # seconds: a bound on a broken server, never an expectation about speed
# What the level fixture model (conftest.level_model_dir) makes of STUDENT at each speech level; untagged it is formal.
STUDENT = "I am a student."
AT_LEVEL = {"formal": "나는 학생입니다.", "polite": "저는 학생이에요.", "plain": "나는 학생이다."}


def wait_until(condition: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting until {what}")
        time.sleep(0.01)


class LiveServer:
    """A TranslationServer on the tests' event-loop thread, called through blocking stubs."""

    def __init__(self, loop: asyncio.AbstractEventLoop, translator, config: ServerConfig, channel_credentials=None):
        self.loop = loop
        self.server = self.run(TranslationServer.start(config, translator))
        target = f"127.0.0.1:{self.server.port}"
        self.channel = (grpc.insecure_channel(target) if channel_credentials is None
                        else grpc.secure_channel(target, channel_credentials))
        self.stub = translator_pb2_grpc.TranslatorStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    def run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(TIMEOUT)

    def shutdown(self):
        """Start a graceful shutdown and return its future."""
        return asyncio.run_coroutine_threadsafe(self.server.shutdown(), self.loop)

    def close(self) -> None:
        self.channel.close()
        self.shutdown().result(TIMEOUT)


@pytest.fixture(scope="module")
def event_loop_thread() -> Iterator[asyncio.AbstractEventLoop]:
    """One loop for every server of this module: grpc.aio wants a single event loop per process."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="grpc-aio", daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.close()


@pytest.fixture
def start_server(event_loop_thread, fixture_translator):
    servers: list[LiveServer] = []

    def start(translator=fixture_translator, channel_credentials=None, **settings) -> LiveServer:
        config = ServerConfig(**{"port": 0, "grace_period_s": 10, **settings})
        servers.append(LiveServer(event_loop_thread, translator, config, channel_credentials))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


@pytest.fixture(scope="module")
def live(event_loop_thread, fixture_translator) -> Iterator[LiveServer]:
    server = LiveServer(event_loop_thread, fixture_translator, ServerConfig(port=0))
    yield server
    server.close()


@pytest.fixture(scope="module")
def level_live(event_loop_thread, level_translator) -> Iterator[LiveServer]:
    """A server on the fixture model trained with speech-level tags."""
    server = LiveServer(event_loop_thread, level_translator, ServerConfig(port=0))
    yield server
    server.close()


def request(text: str, source_lang: str = "ko", target_lang: str = "en", **options) -> pb.TranslateRequest:
    return pb.TranslateRequest(text=text, source_lang=source_lang, target_lang=target_lang,
                               options=pb.DecodingOptions(**options))


def test_translate(live):
    response = live.stub.Translate(request("나는 학생입니다."), timeout=TIMEOUT)
    assert response.translation == "I am a student."
    assert [h.text for h in response.hypotheses] == ["I am a student."]
    assert not response.HasField("attention")
    assert live.stub.Translate(request("I am a student.", "en", "ko"), timeout=TIMEOUT).translation == "나는 학생입니다."


def test_translate_with_nbest_and_attention(live):
    response = live.stub.Translate(request("나는 학생입니다.", beam_size=4, nbest=3, return_attention=True), timeout=TIMEOUT)
    scores = [h.score for h in response.hypotheses]
    assert response.hypotheses[0].text == response.translation == "I am a student."
    assert len(scores) == 3 and scores == sorted(scores, reverse=True)
    attention = response.attention
    assert attention.source_tokens[0] == "<2en>" and attention.source_tokens[-1] == "</s>"
    assert len(attention.rows) == len(attention.target_tokens)
    assert all(len(row.weights) == len(attention.source_tokens) for row in attention.rows)
    assert all(math.isclose(sum(row.weights), 1.0, abs_tol=1e-3) for row in attention.rows)


def test_a_request_may_ask_to_rerank_the_beam_by_back_translation(live, fixture_translator):
    text = f"{KO[0]} {KO[1][::-1]}"  # a learnt sentence and one the model is unsure of
    response = live.stub.Translate(request(text, beam_size=4, nbest=2, reconstruction_weight=1.0), timeout=TIMEOUT)
    [expected] = fixture_translator.translate([text], "ko", "en", SearchOptions(beam_size=4, nbest=2, reconstruction_weight=1.0))
    assert response.translation == expected.text
    assert [h.text for h in response.hypotheses] == [c.text for c in expected.candidates]


def test_a_requests_number_penalty_reaches_the_search_and_an_unset_one_keeps_the_models(fixture_translator):
    validator = RequestValidator(fixture_translator, Limits())
    asked = pb.DecodingOptions(invented_number_penalty=2.5)
    assert validator.search_options(asked, "ko", "en").invented_number_penalty == 2.5
    assert validator.search_options(pb.DecodingOptions(), "ko", "en").invented_number_penalty == 0.0


def test_long_text_is_split_into_sentences_not_truncated(live):
    text = " ".join(KO[:12])
    assert live.stub.Translate(request(text), timeout=TIMEOUT).translation == " ".join(EN[:12])


def test_translate_batch_keeps_order(live):
    order = [7, 0, 33, 12, 5, 21, 2]
    response = live.stub.TranslateBatch(
        pb.TranslateBatchRequest(texts=[KO[i] for i in order], source_lang="ko", target_lang="en",
                                 options=pb.DecodingOptions(nbest=2)),
        timeout=TIMEOUT,
    )
    assert list(response.translations) == [EN[i] for i in order]
    assert [r.translation for r in response.results] == list(response.translations)
    assert all(len(r.hypotheses) == 2 for r in response.results)


def test_translate_stream_answers_in_order(live):
    requests = [request(KO[i]) if i % 2 else request(EN[i], "en", "ko") for i in range(len(PAIRS))]
    expected = [EN[i] if i % 2 else KO[i] for i in range(len(PAIRS))]
    answers = [r.translation for r in live.stub.TranslateStream(iter(requests), timeout=TIMEOUT)]
    assert answers == expected


def test_a_refused_stream_request_ends_the_stream_after_the_earlier_answers(live):
    responses = live.stub.TranslateStream(iter([request(KO[0]), request(KO[1]), request(" "), request(KO[2])]),
                                          timeout=TIMEOUT)
    assert next(responses).translation == EN[0]
    assert next(responses).translation == EN[1]
    with pytest.raises(grpc.RpcError) as refusal:
        next(responses)
    assert refusal.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "requests[2].text is empty" in refusal.value.details()


def test_model_info(live, fixture_translator):
    info = live.stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=TIMEOUT)
    assert {(p.source_lang, p.target_lang) for p in info.language_pairs} == {("ko", "en"), ("en", "ko")}
    assert (info.model_name, info.model_version) == ("fixture-tiny", "test")
    assert info.vocabulary_size == fixture_translator.tokenizer.vocab_size
    assert info.parameter_count == sum(p.numel() for p in fixture_translator.model.parameters())
    assert (info.device, info.precision) == ("cpu", "fp32")
    assert info.limits.max_text_chars == Limits().max_text_chars
    assert info.limits.max_sentence_tokens == fixture_translator.max_source_tokens
    assert list(info.speech_levels) == []  # trained without level tags


def test_model_info_lists_the_speech_levels_of_a_model_trained_with_them(level_live):
    info = level_live.stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=TIMEOUT)
    assert list(info.speech_levels) == ["formal", "polite", "plain"]


def test_translate_at_the_speech_level_asked(level_live):
    assert level_live.stub.Translate(request(STUDENT, "en", "ko"), timeout=TIMEOUT).translation == AT_LEVEL["formal"]
    for level, expected in AT_LEVEL.items():
        response = level_live.stub.Translate(request(STUDENT, "en", "ko", speech_level=level), timeout=TIMEOUT)
        assert response.translation == expected


def test_concurrent_requests_at_different_speech_levels_are_not_mixed(level_live):
    levels = [*AT_LEVEL, *AT_LEVEL, "plain"]
    futures = [level_live.stub.Translate.future(request(STUDENT, "en", "ko", speech_level=level), timeout=TIMEOUT)
               for level in levels]
    batch = level_live.stub.TranslateBatch.future(
        pb.TranslateBatchRequest(texts=[STUDENT] * 3, source_lang="en", target_lang="ko",
                                 options=pb.DecodingOptions(speech_level="polite")), timeout=TIMEOUT)
    assert [f.result().translation for f in futures] == [AT_LEVEL[level] for level in levels]
    assert list(batch.result().translations) == [AT_LEVEL["polite"]] * 3


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (request(KO[0], "ko", "en", speech_level="plain"),
         "a speech level is chosen for translations into Korean, not into 'en'"),
        (request(STUDENT, "en", "ko", speech_level="casual"),
         "speech_level must be one of formal, polite, plain, got 'casual'"),
        (request(STUDENT, "en", "ko", speech_level=""), "speech_level must be one of formal, polite, plain, got ''"),
    ],
)
def test_a_speech_level_the_model_cannot_give_is_refused_with_the_reason(level_live, message, expected):
    refusal = _refusal(level_live.stub.Translate, message)
    assert refusal.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert expected in refusal.details()
    response = level_live.stub.Translate(request(STUDENT, "en", "ko", speech_level="plain"), timeout=TIMEOUT)
    assert response.translation == AT_LEVEL["plain"]


def test_the_token_count_includes_the_speech_level_tag(level_translator):
    validator, text = RequestValidator(level_translator, Limits()), f"{STUDENT} I am tired."
    job = validator.translate_job(request(text, "en", "ko", speech_level="plain"))
    encoded = [level_translator.encode_source(sentence, "ko", job.options) for sentence in split_sentences(text)]
    assert job.tokens == sum(len(ids) for ids in encoded)
    assert job.tokens == validator.translate_job(request(text, "en", "ko")).tokens + len(encoded)


def test_batching_is_invisible(start_server):
    batched = start_server(batching=BatchingConfig())
    unbatched = start_server(batching=BatchingConfig(enabled=False))
    requests = [request(KO[i], beam_size=3, nbest=2) for i in range(16)] + \
               [request(EN[i], "en", "ko", beam_size=1) for i in range(16)]
    concurrent = [batched.stub.Translate.future(r, timeout=TIMEOUT) for r in requests]
    one_by_one = [unbatched.stub.Translate(r, timeout=TIMEOUT) for r in requests]
    for future, reference in zip(concurrent, one_by_one):
        response = future.result()
        assert response.translation == reference.translation
        assert [h.text for h in response.hypotheses] == [h.text for h in reference.hypotheses]
        assert [h.score for h in response.hypotheses] == pytest.approx([h.score for h in reference.hypotheses], abs=1e-4)


def test_many_concurrent_requests_are_all_answered_correctly(live):
    indices = [i % len(PAIRS) for i in range(64)]
    futures = [live.stub.Translate.future(request(KO[i]), timeout=TIMEOUT) for i in indices]
    batch = live.stub.TranslateBatch.future(
        pb.TranslateBatchRequest(texts=EN[:10], source_lang="en", target_lang="ko"), timeout=TIMEOUT)
    assert [f.result().translation for f in futures] == [EN[i] for i in indices]
    assert list(batch.result().translations) == KO[:10]


def test_client_command_line(live, capsys, monkeypatch):
    target = ["--target", f"127.0.0.1:{live.server.port}"]
    assert client.main([*target, KO[0]]) == 0  # Translate
    assert client.main([*target, KO[1], KO[2]]) == 0  # TranslateBatch
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{KO[3]}\n{KO[4]}\n"))
    assert client.main(target) == 0  # TranslateStream
    assert capsys.readouterr().out.splitlines() == EN[:5]
    assert client.main([*target, "--info"]) == 0
    assert json.loads(capsys.readouterr().out)["modelName"] == "fixture-tiny"
    assert client.main([*target, "--target-lang", "ja", KO[0]]) == 1
    assert "error: INVALID_ARGUMENT: language pair ko->ja is not served" in capsys.readouterr().err


def test_client_asks_for_a_speech_level(level_live, capsys):
    target = ["--target", f"127.0.0.1:{level_live.server.port}", "--source-lang", "en", "--target-lang", "ko"]
    assert client.main([*target, "--speech-level", "plain", STUDENT]) == 0
    assert client.main([*target, "--speech-level", "polite", STUDENT, STUDENT]) == 0
    assert capsys.readouterr().out.splitlines() == [AT_LEVEL["plain"], AT_LEVEL["polite"], AT_LEVEL["polite"]]
    with pytest.raises(SystemExit):
        client.main([*target, "--speech-level", "casual", STUDENT])
    assert "invalid choice: 'casual'" in capsys.readouterr().err


def test_every_request_gets_a_structured_log_line(live, caplog):
    def logged() -> list[dict]:
        return [json.loads(JsonFormatter().format(r)) for r in caplog.records if r.name == "serving.requests"]

    with caplog.at_level(logging.INFO, logger="serving.requests"):
        live.stub.Translate(request(KO[0]), timeout=TIMEOUT)
        _refusal(live.stub.Translate, request(""))
        assert len(logged()) == 2  # both lines are written before the answers go out
    answered, refused = logged()
    assert answered["method"] == "Translate" and answered["code"] == "OK"
    assert answered["texts"] == 1 and answered["tokens"] > 0 and answered["batch_requests"] >= 1
    assert answered["latency_ms"] >= 0
    assert refused["code"] == "INVALID_ARGUMENT"


def _refusal(call, message) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as refusal:
        call(message, timeout=TIMEOUT)
    return refusal.value


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (request(""), "text is empty"),
        (request(" \n\t "), "text is empty or only whitespace"),
        (request(KO[0], "ko", "ja"), "language pair ko->ja is not served (served: ko->en, en->ko)"),
        (request(KO[0], "", ""), "language pair -> is not served"),
        (request("가" * 5001), "text has 5001 characters; the limit is 5000"),
        (request(" ".join([KO[0]] * 150)), "tokens; the limit is 1024"),
        (request("word " * 200, "en", "ko"), "the model reads at most 64 per sentence"),
        (request(KO[0], beam_size=0), "options.beam_size is 0; it must be between 1 and 8"),
        (request(KO[0], beam_size=9), "options.beam_size is 9; it must be between 1 and 8"),
        (request(KO[0], beam_size=2, nbest=3), "nbest must be between 1 and beam_size (2), got 3"),
        (request(KO[0], length_penalty=math.nan), "options.length_penalty must be a finite number"),
        (request(KO[0], reconstruction_weight=math.inf), "options.reconstruction_weight must be a finite number"),
        (request(KO[0], reconstruction_weight=-0.5), "reconstruction_weight must be a finite number ≥ 0, got -0.5"),
        (request(KO[0], invented_number_penalty=math.nan), "options.invented_number_penalty must be a finite number"),
        (request(KO[0], invented_number_penalty=-1.0), "invented_number_penalty must be a finite number ≥ 0, got -1.0"),
        (request(KO[0], max_len_b=0), "max_len_b ≥ 1"),
        (request(EN[0], "en", "ko", speech_level="formal"),
         "speech level 'formal' cannot be asked of this model (it was trained without speech-level tags)"),
    ],
)
def test_invalid_translate_requests_are_refused_with_the_reason(live, message, expected):
    refusal = _refusal(live.stub.Translate, message)
    assert refusal.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert expected in refusal.details()
    assert live.stub.Translate(request(KO[0]), timeout=TIMEOUT).translation == EN[0]


@pytest.mark.parametrize(
    ("texts", "expected"),
    [
        ([], "texts is empty: send at least one text"),
        ([KO[0]] * 65, "the batch has 65 texts; the limit is 64 per request"),
        ([KO[0], "  ", KO[1]], "texts[1] is empty or only whitespace"),
    ],
)
def test_invalid_batches_are_refused_with_the_reason(live, texts, expected):
    refusal = _refusal(live.stub.TranslateBatch, pb.TranslateBatchRequest(texts=texts, source_lang="ko", target_lang="en"))
    assert refusal.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert expected in refusal.details()
    assert live.stub.TranslateBatch(pb.TranslateBatchRequest(texts=KO[:2], source_lang="ko", target_lang="en"),
                                    timeout=TIMEOUT).translations == EN[:2]


def test_limits_are_configurable(start_server):
    server = start_server(limits=Limits(max_text_chars=10, max_batch_texts=2))
    assert "the limit is 10" in _refusal(server.stub.Translate, request(KO[1] + " " + KO[2])).details()
    batch = pb.TranslateBatchRequest(texts=KO[:3], source_lang="ko", target_lang="en")
    assert "the limit is 2 per request" in _refusal(server.stub.TranslateBatch, batch).details()


class GatedTranslator:
    """The fixture translator, except that decoding waits until the test opens the gate."""

    def __init__(self, translator):
        self.translator = translator
        self.decoding, self.gate = threading.Event(), threading.Event()

    def __getattr__(self, name):
        return getattr(self.translator, name)

    def beam_search(self, options):
        """A search whose first step waits for the gate (the batcher decodes through searches, step by step)."""
        search = self.translator.beam_search(options)
        step = search.step

        def gated_step():
            self.decoding.set()
            self.gate.wait(TIMEOUT)
            return step()

        search.step = gated_step
        return search


@pytest.fixture
def gated(fixture_translator) -> Iterator[GatedTranslator]:
    translator = GatedTranslator(fixture_translator)
    yield translator
    translator.gate.set()


def test_a_full_queue_is_refused_and_the_server_recovers(start_server, gated):
    server = start_server(gated, batching=BatchingConfig(enabled=False, max_queued_requests=2))
    decoding = server.stub.Translate.future(request(KO[0]), timeout=TIMEOUT)
    wait_until(gated.decoding.is_set, "the worker is busy with the first request")
    queued = [server.stub.Translate.future(request(KO[i]), timeout=TIMEOUT) for i in (1, 2)]
    wait_until(lambda: server.server.batcher.queued == 2, "two requests wait in the queue")
    refusal = _refusal(server.stub.Translate, request(KO[3]))
    assert refusal.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "the limit is 2" in refusal.details()
    gated.gate.set()
    assert [f.result().translation for f in [decoding, *queued]] == EN[:3]
    assert server.stub.Translate(request(KO[3]), timeout=TIMEOUT).translation == EN[3]


def test_an_expired_request_leaves_the_queue_without_blocking_others(start_server, gated):
    server = start_server(gated, batching=BatchingConfig(enabled=False))
    decoding = server.stub.Translate.future(request(KO[0]), timeout=TIMEOUT)
    wait_until(gated.decoding.is_set, "the worker is busy with the first request")
    impatient = server.stub.Translate.future(request(KO[1]), timeout=0.5)
    patient = server.stub.Translate.future(request(KO[2]), timeout=TIMEOUT)
    assert impatient.exception(TIMEOUT).code() == grpc.StatusCode.DEADLINE_EXCEEDED
    wait_until(lambda: server.server.batcher.queued == 1, "the expired request gave its slot back")
    gated.gate.set()
    assert decoding.result().translation == EN[0]
    assert patient.result().translation == EN[2]


def test_a_cancelled_request_leaves_the_queue(start_server, gated):
    server = start_server(gated, batching=BatchingConfig(enabled=False))
    decoding = server.stub.Translate.future(request(KO[0]), timeout=TIMEOUT)
    wait_until(gated.decoding.is_set, "the worker is busy with the first request")
    abandoned = server.stub.Translate.future(request(KO[1]), timeout=TIMEOUT)
    wait_until(lambda: server.server.batcher.queued == 1, "the second request is queued")
    abandoned.cancel()
    wait_until(lambda: server.server.batcher.queued == 0, "the cancelled request gave its slot back")
    gated.gate.set()
    assert decoding.result().translation == EN[0]


def test_health_turns_not_serving_when_shutdown_begins(start_server):
    server = start_server()
    for service in ("", "nmt.v1.Translator"):
        check = server.health.Check(health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT)
        assert check.status == SERVING
    watch = server.health.Watch(health_pb2.HealthCheckRequest(service="nmt.v1.Translator"), timeout=TIMEOUT)
    assert next(watch).status == SERVING
    stopping = server.shutdown()
    assert next(watch).status == NOT_SERVING
    watch.cancel()
    stopping.result(TIMEOUT)


def test_reflection_lists_the_services(live):
    database = ProtoReflectionDescriptorDatabase(live.channel)
    assert {"nmt.v1.Translator", "grpc.health.v1.Health"} <= set(database.get_services())
    assert database.FindFileContainingSymbol("nmt.v1.Translator").name == "nmt/v1/translator.proto"


def test_reflection_can_be_turned_off(start_server):
    server = start_server(reflection=False)
    with pytest.raises(grpc.RpcError) as refusal:
        ProtoReflectionDescriptorDatabase(server.channel).get_services()
    assert refusal.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_a_port_in_use_is_a_startup_error(live, start_server):
    with pytest.raises(StartupError, match=f"cannot listen on 127.0.0.1:{live.server.port}: the port is in use"):
        start_server(port=live.server.port)


def test_a_missing_model_is_a_startup_error(tmp_path):
    with pytest.raises(StartupError, match=f"no model at {tmp_path / 'absent'}; train one"):
        load_translator(ServerConfig(model_dir=tmp_path / "absent"))


def test_the_precision_flag_loads_an_int8_decoding_model(fixture_model_dir):
    config, _ = parse_args(["--model", str(fixture_model_dir), "--device", "cpu", "--precision", "int8"])
    translator = load_translator(config)
    assert translator.precision == "int8"
    assert translator.translate(["감사합니다."], "ko", "en")[0].text == "Thank you."


def test_the_server_may_set_every_pairs_reranking_weight(fixture_model_dir, tmp_path):
    model_dir = shutil.copytree(fixture_model_dir, tmp_path / "reranking")
    metadata = json.loads((model_dir / "metadata.json").read_text(encoding="utf-8"))
    metadata["decoding"] = {"directions": {"ko-en": {"reconstruction_weight": 0.3}}}
    (model_dir / "metadata.json").write_text(json.dumps(metadata), encoding="utf-8")
    as_tuned = load_translator(parse_args(["--model", str(model_dir), "--device", "cpu"])[0])
    assert [as_tuned.default_options(*pair).reconstruction_weight for pair in (("ko", "en"), ("en", "ko"))] == [0.3, 0.0]
    switched_off = load_translator(parse_args(["--model", str(model_dir), "--device", "cpu", "--reconstruction-weight", "0"])[0])
    assert [switched_off.default_options(*pair).reconstruction_weight for pair in (("ko", "en"), ("en", "ko"))] == [0.0, 0.0]
    assert switched_off.default_options("ko", "en", reconstruction_weight=1.0).reconstruction_weight == 1.0  # a request's own wins
    with pytest.raises(SystemExit):
        parse_args(["--reconstruction-weight", "-1"])


def test_the_model_is_loaded_in_a_thread_that_has_ended(fixture_model_dir, monkeypatch):
    """Only the batcher's thread may keep an OpenMP pool (see load_translator): loading leaves none behind."""
    from serving import server

    loaded_in, real_load = [], server.Translator.load

    def load(*args, **kwargs):
        loaded_in.append(threading.current_thread())
        return real_load(*args, **kwargs)

    monkeypatch.setattr(server.Translator, "load", load)
    load_translator(ServerConfig(model_dir=fixture_model_dir, device="cpu"))
    assert loaded_in[0] is not threading.main_thread()
    assert not loaded_in[0].is_alive()


def test_the_kernel_caches_are_bounded_before_the_model_is_loaded(tmp_path, unset_kernel_caches):
    """Both oneDNN caches are sized when the model's weights are first packed, so main() must bound them before."""
    from nmt.memory import KERNEL_CACHE_VARIABLES
    from serving import server

    seen = {}

    def load(config):
        seen.update({variable: os.environ.get(variable) for variable in KERNEL_CACHE_VARIABLES})
        raise StartupError("stop here")

    unset_kernel_caches.setattr(server, "load_translator", load)
    assert server.main(["--model", str(tmp_path), "--no-http", "--kernel-cache-capacity", "32"]) == 2
    assert seen == {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "32", "LRU_CACHE_CAPACITY": "32"}


def test_an_unknown_precision_is_refused(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--precision", "fp16"])
    assert "invalid choice: 'fp16'" in capsys.readouterr().err


def test_a_pair_without_a_decoder_is_a_startup_error(fixture_model_dir, tmp_path):
    model_dir = shutil.copytree(fixture_model_dir, tmp_path / "model")
    metadata = json.loads((model_dir / "metadata.json").read_text())
    metadata["language_pairs"].append(["ko", "ja"])
    (model_dir / "metadata.json").write_text(json.dumps(metadata))
    with pytest.raises(StartupError, match="lists ko->ja but has no decoder for ja"):
        load_translator(ServerConfig(model_dir=model_dir, device="cpu"))


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_tls(start_server, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    server = start_server(tls_cert=cert, tls_key=key,
                          channel_credentials=grpc.ssl_channel_credentials(root_certificates=cert.read_bytes()))
    assert server.stub.Translate(request(KO[0]), timeout=TIMEOUT).translation == EN[0]
    with grpc.insecure_channel(f"127.0.0.1:{server.server.port}") as plaintext:
        with pytest.raises(grpc.RpcError):
            translator_pb2_grpc.TranslatorStub(plaintext).Translate(request(KO[0]), timeout=5)
