"""The HTTP/JSON API and web page, served by the real server beside gRPC, called over loopback with urllib."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from google.protobuf import json_format
from test_serving import (  # noqa: F401
    AT_LEVEL, EN, KO, STUDENT, TIMEOUT, GatedTranslator, LiveServer, event_loop_thread, gated, request, start_server, wait_until,
)

from nmt.fonts import web_font
from serving.config import BatchingConfig, HttpConfig, ServerConfig
from serving.http import WEB_DIR
from serving.stubs import translator_pb2 as pb


def call(server: LiveServer, method: str, path: str, body: dict | None = None, raw: bytes | None = None) -> tuple[int, dict]:
    """(status, JSON body) of one request to the server's HTTP port."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    url = f"http://127.0.0.1:{server.server.http.port}{path}"
    outgoing = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(outgoing, timeout=TIMEOUT) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def fetch(server: LiveServer, path: str) -> tuple[str, bytes]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.server.http.port}{path}", timeout=TIMEOUT) as response:
        return response.headers["Content-Type"], response.read()


def translate_body(text: str, source_lang: str = "ko", target_lang: str = "en", **options) -> dict:
    return {"text": text, "source_lang": source_lang, "target_lang": target_lang, "options": options}


@pytest.fixture(scope="module")
def live(event_loop_thread, fixture_translator) -> Iterator[LiveServer]:  # noqa: F811
    server = LiveServer(event_loop_thread, fixture_translator, ServerConfig(port=0, http=HttpConfig(port=0)))
    yield server
    server.close()


@pytest.fixture(scope="module")
def level_live(event_loop_thread, level_translator) -> Iterator[LiveServer]:  # noqa: F811
    """The HTTP API on the fixture model trained with speech-level tags."""
    server = LiveServer(event_loop_thread, level_translator, ServerConfig(port=0, http=HttpConfig(port=0)))
    yield server
    server.close()


def test_translate(live):
    status, body = call(live, "POST", "/v1/translate", translate_body(KO[0], beam_size=3, nbest=2))
    assert status == 200
    assert body["translation"] == EN[0]
    assert [h["text"] for h in body["hypotheses"]][0] == EN[0] and len(body["hypotheses"]) == 2
    assert body["hypotheses"][0]["score"] >= body["hypotheses"][1]["score"]
    assert "attention" not in body


def test_translate_batch_keeps_the_order(live):
    status, body = call(live, "POST", "/v1/translate/batch", {"texts": KO[:3], "source_lang": "ko", "target_lang": "en"})
    assert status == 200
    assert body["translations"] == EN[:3]
    assert [result["translation"] for result in body["results"]] == EN[:3]


def test_http_and_grpc_give_the_same_translations(live):
    texts = [(KO[i], "ko", "en") for i in range(4)] + [(EN[i], "en", "ko") for i in range(4)] + [(f"{KO[0]} {KO[1]}", "ko", "en")]
    for text, source, target in texts:
        status, body = call(live, "POST", "/v1/translate", translate_body(text, source, target, beam_size=2, nbest=2))
        over_grpc = live.stub.Translate(request(text, source, target, beam_size=2, nbest=2), timeout=TIMEOUT)
        assert status == 200
        assert body["translation"] == over_grpc.translation
        assert [h["text"] for h in body["hypotheses"]] == [h.text for h in over_grpc.hypotheses]
        # proto3 JSON writes a float32 in its shortest form, which reads back as the same float32
        assert [h["score"] for h in body["hypotheses"]] == pytest.approx([h.score for h in over_grpc.hypotheses], rel=1e-6)


def test_attention_asked_of_translate_is_the_grpc_field(live):
    status, body = call(live, "POST", "/v1/translate", translate_body(KO[0], return_attention=True))
    over_grpc = live.stub.Translate(request(KO[0], return_attention=True), timeout=TIMEOUT)
    assert status == 200
    assert body["attention"]["target_tokens"] == list(over_grpc.attention.target_tokens)
    assert len(body["attention"]["rows"]) == len(over_grpc.attention.rows)


def test_explain_returns_the_translation_and_every_map(live, fixture_translator):
    status, body = call(live, "POST", "/v1/explain", translate_body(f"{KO[0]} {KO[1]}"))
    assert status == 200
    assert body["translation"] == f"{EN[0]} {EN[1]}"
    config = fixture_translator.model.config
    first, second = body["sentences"]
    rows, columns = len(first["target_pieces"]), len(first["source_pieces"])
    assert len(first["cross"]) == config.decoder_layers and len(first["cross"][0]) == config.n_heads
    assert len(first["cross"][0][0]) == rows and len(first["cross"][0][0][0]) == columns
    assert len(first["encoder"]) == config.encoder_layers and len(first["encoder"][0][0]) == columns
    assert len(first["decoder"][0][0][0]) == len(first["decoder_input_pieces"]) == rows
    assert second["source_pieces"] != first["source_pieces"]


def test_model_info_is_what_grpc_says(live):
    status, body = call(live, "GET", "/v1/model")
    over_grpc = live.stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=TIMEOUT)
    assert status == 200
    assert body == json_format.MessageToDict(over_grpc, preserving_proto_field_name=True,
                                             always_print_fields_with_no_presence=True)
    assert {"source_lang": "ko", "target_lang": "en"} in body["language_pairs"]


def test_model_info_lists_the_speech_levels(live, level_live):
    assert call(level_live, "GET", "/v1/model")[1]["speech_levels"] == ["formal", "polite", "plain"]
    assert call(live, "GET", "/v1/model")[1]["speech_levels"] == []


def test_translate_at_the_speech_level_asked(level_live):
    for level, expected in AT_LEVEL.items():
        status, body = call(level_live, "POST", "/v1/translate", translate_body(STUDENT, "en", "ko", speech_level=level))
        assert (status, body["translation"]) == (200, expected)
    batch = {"texts": [STUDENT, STUDENT], "sourceLang": "en", "targetLang": "ko", "options": {"speechLevel": "plain"}}
    assert call(level_live, "POST", "/v1/translate/batch", batch)[1]["translations"] == [AT_LEVEL["plain"]] * 2


def test_explain_shows_the_speech_level_tag_the_encoder_read(level_live):
    status, body = call(level_live, "POST", "/v1/explain", translate_body(STUDENT, "en", "ko", speech_level="polite"))
    assert (status, body["translation"]) == (200, AT_LEVEL["polite"])
    assert body["sentences"][0]["source_pieces"][:2] == ["<2ko>", "<polite>"]


@pytest.mark.parametrize("body, message", [
    (translate_body(KO[0], "ko", "en", speech_level="formal"),
     "a speech level is chosen for translations into Korean, not into 'en'"),
    (translate_body(STUDENT, "en", "ko", speech_level="casual"),
     "speech_level must be one of formal, polite, plain, got 'casual'"),
])
def test_a_speech_level_the_model_cannot_give_is_400(level_live, body, message):
    status, answer = call(level_live, "POST", "/v1/translate", body)
    assert status == 400
    assert answer["error"]["code"] == "INVALID_ARGUMENT" and message in answer["error"]["message"]
    body = translate_body(STUDENT, "en", "ko", speech_level="plain")
    assert call(level_live, "POST", "/v1/translate", body)[1]["translation"] == AT_LEVEL["plain"]


def test_health(live):
    assert call(live, "GET", "/healthz") == (200, {"status": "SERVING"})


@pytest.mark.parametrize("body, message", [
    (translate_body("   "), "text is empty or only whitespace"),
    (translate_body(KO[0], "ko", "fr"), "language pair ko->fr is not served"),
    (translate_body(KO[0], beam_size=99), "options.beam_size is 99; it must be between 1 and 8"),
    (translate_body(EN[0], "en", "ko", speech_level="formal"),
     "speech level 'formal' cannot be asked of this model (it was trained without speech-level tags)"),
    ({"text": KO[0], "source_lang": "ko", "target_lang": "en", "colour": "blue"}, "invalid request: "),
    ({"text": 5, "source_lang": "ko", "target_lang": "en"}, "invalid request: "),
])
def test_invalid_input_is_400_with_the_grpc_message(live, body, message):
    status, answer = call(live, "POST", "/v1/translate", body)
    assert status == 400
    assert answer["error"]["code"] == "INVALID_ARGUMENT" and message in answer["error"]["message"]


def test_refusals_say_what_grpc_says(live):
    body = translate_body(KO[0], "ko", "fr")
    with pytest.raises(grpc.RpcError) as refusal:
        live.stub.Translate(request(KO[0], "ko", "fr"), timeout=TIMEOUT)
    assert call(live, "POST", "/v1/translate", body)[1]["error"] == {"code": refusal.value.code().name,
                                                                    "message": refusal.value.details()}


@pytest.mark.parametrize("raw, message", [(b"{not json", "not JSON"), (b"[1, 2]", "must be a JSON object"),
                                          (b"\xff\xfe", "not JSON")])
def test_a_body_that_is_not_a_json_object_is_400(live, raw, message):
    status, answer = call(live, "POST", "/v1/translate", raw=raw)
    assert status == 400 and message in answer["error"]["message"]


def test_an_empty_batch_is_400(live):
    status, answer = call(live, "POST", "/v1/translate/batch", {"texts": [], "source_lang": "ko", "target_lang": "en"})
    assert status == 400 and answer["error"]["message"] == "texts is empty: send at least one text"


def test_explain_refuses_a_text_over_its_token_limit(start_server):
    server = start_server(http=HttpConfig(port=0, max_explain_tokens=4))
    status, answer = call(server, "POST", "/v1/explain", translate_body(KO[0]))
    assert status == 400 and "explain reads at most 4" in answer["error"]["message"]
    assert call(server, "POST", "/v1/translate", translate_body(KO[0]))[1]["translation"] == EN[0]


def test_unknown_routes_and_methods_are_json_errors(live):
    status, answer = call(live, "GET", "/v1/nothing")
    assert status == 404 and answer["error"]["code"] == "NOT_FOUND"
    status, answer = call(live, "GET", "/v1/translate")
    assert status == 405 and answer["error"]["code"] == "METHOD_NOT_ALLOWED"


def test_a_body_over_the_limit_is_413_and_the_server_keeps_serving(start_server):
    server = start_server(http=HttpConfig(port=0), max_receive_message_bytes=4096)
    status, answer = call(server, "POST", "/v1/translate", translate_body("가" * 5000))
    assert status == 413
    assert "larger than the limit of 4096 bytes" in answer["error"]["message"]
    assert call(server, "POST", "/v1/translate", translate_body(KO[0]))[1]["translation"] == EN[0]


def test_a_full_queue_is_429_and_the_server_recovers(start_server, gated):  # noqa: F811
    server = start_server(gated, batching=BatchingConfig(enabled=False, max_queued_requests=2), http=HttpConfig(port=0))
    with ThreadPoolExecutor(3) as clients:
        decoding = clients.submit(call, server, "POST", "/v1/translate", translate_body(KO[0]))
        wait_until(gated.decoding.is_set, "the worker is busy with the first request")
        queued = [clients.submit(call, server, "POST", "/v1/translate", translate_body(KO[i])) for i in (1, 2)]
        wait_until(lambda: server.server.batcher.queued == 2, "two requests wait in the queue")
        status, answer = call(server, "POST", "/v1/translate", translate_body(KO[3]))
        assert status == 429
        assert answer["error"]["code"] == "RESOURCE_EXHAUSTED" and "the limit is 2" in answer["error"]["message"]
        gated.gate.set()
        assert [f.result(TIMEOUT)[1]["translation"] for f in [decoding, *queued]] == EN[:3]
    assert call(server, "POST", "/v1/translate", translate_body(KO[3]))[1]["translation"] == EN[3]


class GatedExplainer(GatedTranslator):
    """The gated fixture translator, whose explaining (its search for the hypotheses) also waits for the gate."""

    def translate_sentences(self, *args, **kwargs):
        self.decoding.set()
        self.gate.wait(TIMEOUT)
        return self.translator.translate_sentences(*args, **kwargs)


def test_explain_requests_beyond_the_queue_bound_are_429(start_server, fixture_translator):
    explainer = GatedExplainer(fixture_translator)
    server = start_server(explainer, http=HttpConfig(port=0, max_queued_explains=1))
    try:
        with ThreadPoolExecutor(1) as clients:
            first = clients.submit(call, server, "POST", "/v1/explain", translate_body(KO[0]))
            wait_until(explainer.decoding.is_set, "the first explain request runs")
            status, answer = call(server, "POST", "/v1/explain", translate_body(KO[1]))
            assert status == 429 and "1 explain requests are queued" in answer["error"]["message"]
            explainer.gate.set()
            assert first.result(TIMEOUT)[1]["translation"] == EN[0]
    finally:
        explainer.gate.set()
    assert call(server, "POST", "/v1/explain", translate_body(KO[1]))[1]["translation"] == EN[1]


def test_a_draining_server_answers_503(start_server):
    server = start_server(http=HttpConfig(port=0))
    server.loop.call_soon_threadsafe(server.server.http.drain)
    wait_until(lambda: server.server.http.draining, "the HTTP API drains")
    assert call(server, "GET", "/healthz") == (503, {"status": "NOT_SERVING"})
    status, answer = call(server, "POST", "/v1/translate", translate_body(KO[0]))
    assert status == 503
    assert answer["error"] == {"code": "UNAVAILABLE", "message": "the server is shutting down; retry on another replica"}


def test_grpc_only_when_http_is_off(start_server):
    assert start_server().server.http is None


def test_every_route_is_in_the_openapi_description(live):
    _, spec = call(live, "GET", "/openapi.json")
    described = {(path, method.upper()) for path, item in spec["paths"].items() for method in item}
    routes = {(route.resource.canonical, route.method) for route in live.server.http.app.router.routes()
              if route.method != "HEAD"}  # aiohttp adds HEAD beside every GET
    assert routes == described


def test_the_openapi_decoding_options_are_the_protos():
    spec = json.loads((WEB_DIR / "openapi.json").read_text("utf-8"))
    assert set(spec["components"]["schemas"]["DecodingOptions"]["properties"]) == set(pb.DecodingOptions.DESCRIPTOR.fields_by_name)


def test_the_page_and_its_files_are_served_by_the_project(live):
    content_type, page = fetch(live, "/")
    assert content_type.startswith("text/html") and b'data-testid="heatmap"' in page
    assert fetch(live, "/static/NanumGothic.ttf") == ("font/ttf", web_font())
    for name in ("index.html", "app.js", "style.css"):
        text = (WEB_DIR / name).read_text("utf-8")
        assert "http://" not in text and "https://" not in text and "//cdn" not in text, f"{name} reaches outside the server"
        if name != "index.html":
            assert fetch(live, f"/static/{name}")[1] == text.encode("utf-8")


def test_hangul_is_sent_as_utf8_not_escapes(live):
    outgoing = urllib.request.Request(f"http://127.0.0.1:{live.server.http.port}/v1/translate", method="POST",
                                      data=json.dumps(translate_body(EN[0], "en", "ko")).encode())
    with urllib.request.urlopen(outgoing, timeout=TIMEOUT) as response:
        assert response.headers.get_content_charset() == "utf-8"
        assert KO[0].encode("utf-8") in response.read()
