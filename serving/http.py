"""The HTTP/JSON API and the web page, served beside gRPC in the same process (``make serve``; ``--no-http`` turns it off).

aiohttp runs on the asyncio event loop that ``grpc.aio`` already runs, so both front ends share one loop, one
:class:`~serving.batcher.Batcher`, one :class:`~serving.validation.RequestValidator` and one response mapping
(:mod:`serving.messages`): a JSON body is parsed into the same protobuf request a gRPC client sends and the
answer is the gRPC response in proto3's JSON form. The web page at ``/`` is plain files with no build step,
and the Hangul font it draws with comes from the same wheel as the plots' (:mod:`nmt.fonts`).

``POST /v1/explain`` also returns every attention map of the translation (:mod:`nmt.explain`). It runs on the
batcher's worker thread, which owns the model, between two decoding steps (:meth:`Batcher.call`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from pathlib import Path

import grpc
from aiohttp import web
from google.protobuf import json_format
from google.protobuf.message import Message

from nmt.explain import Explanation, explain
from nmt.fonts import web_font
from nmt.translator import Translator
from serving.batcher import Batcher, Decoded, Job
from serving.config import ServerConfig
from serving.errors import InvalidRequest, Overloaded, ServingError, ShuttingDown
from serving.messages import batch_message, model_info_message, translation_message
from serving.observability import Metrics, RequestRecord, log_request
from serving.stubs import translator_pb2
from serving.validation import RequestValidator

logger = logging.getLogger("serving.http")
WEB_DIR = Path(__file__).parent / "web"
HTTP_STATUS = {  # how each refusal of the gRPC service reads over HTTP
    grpc.StatusCode.INVALID_ARGUMENT: HTTPStatus.BAD_REQUEST,
    grpc.StatusCode.RESOURCE_EXHAUSTED: HTTPStatus.TOO_MANY_REQUESTS,
    grpc.StatusCode.UNAVAILABLE: HTTPStatus.SERVICE_UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: HTTPStatus.GATEWAY_TIMEOUT,
    grpc.StatusCode.INTERNAL: HTTPStatus.INTERNAL_SERVER_ERROR,
}
Handler = Callable[[web.Request, RequestRecord], Awaitable[Message | dict]]


def json_response(data: dict, status: int = 200) -> web.Response:
    """UTF-8 JSON with Hangul written as itself, not as \\u escapes: readable with curl."""
    return web.json_response(data, status=status, dumps=functools.partial(json.dumps, ensure_ascii=False))


def error_response(status: int, code: str, message: str) -> web.Response:
    return json_response({"error": {"code": code, "message": message}}, status=status)


def message_json(message: Message) -> dict:
    """A response message as proto3 JSON, with the proto's field names and empty lists written out."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)


class HttpApi:
    """The aiohttp application and its site; :meth:`start` binds it, :meth:`drain` and :meth:`stop` end it."""

    def __init__(self, translator: Translator, batcher: Batcher, validator: RequestValidator, config: ServerConfig,
                 metrics: Metrics | None):
        self.translator, self.batcher, self.validator, self.config, self.metrics = translator, batcher, validator, config, metrics
        self.draining = False
        self._explains = 0  # explain requests waiting for or running on the batcher's worker
        self.app = web.Application(client_max_size=config.max_receive_message_bytes, middlewares=[self._json_errors])
        self.app.add_routes([
            web.post("/v1/translate", self._api("Translate", self._translate)),
            web.post("/v1/translate/batch", self._api("TranslateBatch", self._translate_batch)),
            web.post("/v1/explain", self._api("Explain", self._explain)),
            web.get("/v1/model", self._api("GetModelInfo", self._model_info)),
            web.get("/healthz", self._health),
            web.get("/", self._file(WEB_DIR / "index.html")),
            web.get("/openapi.json", self._file(WEB_DIR / "openapi.json")),
            web.get("/static/app.js", self._file(WEB_DIR / "app.js")),
            web.get("/static/style.css", self._file(WEB_DIR / "style.css")),
            web.get("/static/NanumGothic.ttf", self._font),
        ])
        # The request log is ours (serving.observability); cleanup() lets in-flight requests finish within the grace period.
        self._runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=config.grace_period_s)
        self.port: int | None = None

    async def start(self) -> int:
        """Listen on the configured host and port; returns the bound port (useful with port 0)."""
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.http.host, self.config.http.port, reuse_port=False)
        try:
            await site.start()
        except OSError:
            await self._runner.cleanup()
            raise
        self.port = self._runner.addresses[0][1]
        return self.port

    def drain(self) -> None:
        """Refuse new requests with 503 (and report NOT_SERVING); those in flight still finish."""
        self.draining = True

    async def stop(self) -> None:
        """Close the listening socket and wait up to the grace period for in-flight requests."""
        self.drain()
        await self._runner.cleanup()

    # Routes

    async def _translate(self, request: web.Request, record: RequestRecord) -> Message:
        job = self.validator.translate_job(await self._body(request, translator_pb2.TranslateRequest()))
        decoded = await self._decode(job, record)
        return translation_message(decoded.translations[0])

    async def _translate_batch(self, request: web.Request, record: RequestRecord) -> Message:
        job = self.validator.batch_job(await self._body(request, translator_pb2.TranslateBatchRequest()))
        return batch_message((await self._decode(job, record)).translations)

    async def _explain(self, request: web.Request, record: RequestRecord) -> dict:
        job = self.validator.translate_job(await self._body(request, translator_pb2.TranslateRequest()))
        if job.tokens > self.config.http.max_explain_tokens:
            raise InvalidRequest(f"text has {job.tokens} tokens; explain reads at most {self.config.http.max_explain_tokens} "
                                 "(its attention maps grow with the square of the length)")
        if self._explains >= self.config.http.max_queued_explains:
            raise Overloaded(f"the server is busy: {self._explains} explain requests are queued, the limit is "
                             f"{self.config.http.max_queued_explains}; retry later")
        record.texts, record.tokens = 1, job.tokens
        self._explains += 1
        try:
            explanation: Explanation = await asyncio.wrap_future(self.batcher.call(
                functools.partial(explain, self.translator, job.texts[0], job.source_lang, job.target_lang, job.options)
            ))
        finally:
            self._explains -= 1
        return {**message_json(translation_message(explanation.translation)),
                "sentences": [sentence.to_dict() for sentence in explanation.sentences]}

    async def _model_info(self, request: web.Request, record: RequestRecord) -> Message:
        return model_info_message(self.translator, self.config.limits)

    @staticmethod
    async def _font(request: web.Request) -> web.Response:
        return web.Response(body=web_font(), content_type="font/ttf", headers={"Cache-Control": "max-age=86400"})

    async def _health(self, request: web.Request) -> web.Response:
        status = "NOT_SERVING" if self.draining else "SERVING"
        return json_response({"status": status}, status=503 if self.draining else 200)

    # Plumbing

    async def _decode(self, job: Job, record: RequestRecord) -> Decoded:
        """Through the batcher, like a gRPC request; a client that goes away cancels the job."""
        record.texts, record.tokens = len(job.texts), job.tokens
        decoded = await asyncio.wrap_future(self.batcher.submit(job))
        record.decoded_with(decoded.batch_requests)
        return decoded

    @staticmethod
    async def _body(request: web.Request, message: Message) -> Message:
        """The JSON body parsed into ``message``; field names as in the proto (snake_case or lowerCamelCase)."""
        try:
            body = json.loads(await request.read())
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise InvalidRequest(f"the request body is not JSON: {error}") from error
        if not isinstance(body, dict):
            raise InvalidRequest("the request body must be a JSON object")
        try:
            return json_format.ParseDict(body, message)
        except json_format.ParseError as error:
            raise InvalidRequest(f"invalid request: {error}") from error

    def _api(self, method: str, handler: Handler) -> Callable[[web.Request], Awaitable[web.Response]]:
        """Refusals as JSON errors with the gRPC service's codes and messages, and a log line per request."""

        async def respond(request: web.Request) -> web.Response:
            record = RequestRecord(f"http.{method}", request.remote or "")
            try:
                if self.draining:
                    raise ShuttingDown()
                answer = await handler(request, record)
            except ServingError as error:
                record.code = error.code.name
                return error_response(HTTP_STATUS[error.code], error.code.name, str(error))
            except asyncio.CancelledError:
                record.code = grpc.StatusCode.CANCELLED.name
                raise
            except web.HTTPException as error:  # e.g. the body is over the limit
                record.code = HTTPStatus(error.status).name
                raise
            except Exception:
                record.code = grpc.StatusCode.INTERNAL.name
                logger.exception("%s failed", method)
                return error_response(500, record.code, "internal error; the server log has the details")
            finally:
                log_request(record, self.metrics)
            return json_response(message_json(answer) if isinstance(answer, Message) else answer)

        return respond

    @staticmethod
    def _file(path: Path) -> Callable[[web.Request], Awaitable[web.FileResponse]]:
        async def send(request: web.Request) -> web.FileResponse:
            return web.FileResponse(path)

        return send

    @web.middleware
    async def _json_errors(self, request: web.Request, handler) -> web.StreamResponse:
        """aiohttp's own refusals (unknown route, wrong method, body too large) as JSON errors too."""
        try:
            return await handler(request)
        except web.HTTPException as error:
            if error.status < 400:
                raise
            status = HTTPStatus(error.status)
            if error.status == 413:
                message = (f"the request body is larger than the limit of {self.config.max_receive_message_bytes} bytes "
                           "(--max-message-bytes)")
            else:
                message = f"{status.phrase}: {request.method} {request.path}"
            response = error_response(error.status, status.name, message)
            if error.status == 405:
                response.headers["Allow"] = error.headers.get("Allow", "")
            return response
