"""Command-line client of the translation server (``make translate TEXT=...``).

    python -m serving.client --source-lang ko --target-lang en "나는 학생입니다."     # Translate
    python -m serving.client --source-lang ko --target-lang en "첫째." "둘째."        # TranslateBatch
    python -m serving.client --source-lang ko --target-lang en < input.ko            # TranslateStream, a line each
    python -m serving.client --source-lang en --target-lang ko --speech-level polite "Thank you."
    python -m serving.client --info                                                  # GetModelInfo

Prints one translation per line, or whole responses as JSON with --json.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import grpc
from google.protobuf.json_format import MessageToJson
from google.protobuf.message import Message

from nmt.speech_level import REQUESTABLE_LEVELS
from serving.stubs import translator_pb2, translator_pb2_grpc


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m serving.client", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("texts", nargs="*", help="texts to translate; none: read stdin, one text per line")
    parser.add_argument("--target", default="127.0.0.1:50051", help="server address (default: %(default)s)")
    parser.add_argument("--source-lang", default="ko")
    parser.add_argument("--target-lang", default="en")
    parser.add_argument("--beam-size", type=int, help="default: the server's")
    parser.add_argument("--nbest", type=int, help="hypotheses per text (with --json)")
    parser.add_argument("--speech-level", choices=[level.value for level in REQUESTABLE_LEVELS],
                        help="speech level of a translation into Korean, if the model has level tags (see --info)")
    parser.add_argument("--reconstruction-weight", type=float,
                        help="rerank the beam by back-translation at this weight; 0 turns it off (default: the server's)")
    parser.add_argument("--invented-number-penalty", type=float,
                        help="discourage numbers the source does not contain by this much; 0 turns it off (default: the server's)")
    parser.add_argument("--attention", action="store_true", help="ask for the attention matrix (with --json)")
    parser.add_argument("--json", action="store_true", help="print whole responses as JSON")
    parser.add_argument("--info", action="store_true", help="print what the server translates and exit")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per call (default: %(default)s)")
    parser.add_argument("--tls-ca", type=Path, help="PEM root certificate: connect with TLS, trusting it")
    return parser.parse_args(argv)


def open_channel(target: str, tls_ca: Path | None) -> grpc.Channel:
    options = [("grpc.max_receive_message_length", -1)]  # the server bounds its answers; attention can be large
    if tls_ca is None:
        return grpc.insecure_channel(target, options)
    return grpc.secure_channel(target, grpc.ssl_channel_credentials(root_certificates=tls_ca.read_bytes()), options)


def decoding_options(args: argparse.Namespace) -> translator_pb2.DecodingOptions:
    options = translator_pb2.DecodingOptions(return_attention=args.attention)
    for name in ("beam_size", "nbest", "speech_level", "reconstruction_weight", "invented_number_penalty"):
        if getattr(args, name) is not None:
            setattr(options, name, getattr(args, name))
    return options


def call(stub: translator_pb2_grpc.TranslatorStub, args: argparse.Namespace, stdin: Iterable[str]) -> Iterator[Message]:
    """The responses to print: one call, shaped by how many texts were given."""
    if args.info:
        yield stub.GetModelInfo(translator_pb2.GetModelInfoRequest(), timeout=args.timeout)
        return
    languages = {"source_lang": args.source_lang, "target_lang": args.target_lang, "options": decoding_options(args)}
    if len(args.texts) == 1:
        yield stub.Translate(translator_pb2.TranslateRequest(text=args.texts[0], **languages), timeout=args.timeout)
    elif args.texts:
        batch = stub.TranslateBatch(translator_pb2.TranslateBatchRequest(texts=args.texts, **languages), timeout=args.timeout)
        yield from batch.results
    else:
        requests = (translator_pb2.TranslateRequest(text=line.rstrip("\n"), **languages) for line in stdin)
        yield from stub.TranslateStream(requests)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with open_channel(args.target, args.tls_ca) as channel:
        try:
            for response in call(translator_pb2_grpc.TranslatorStub(channel), args, sys.stdin):
                as_json = args.json or args.info
                print(MessageToJson(response, ensure_ascii=False, indent=None) if as_json else response.translation, flush=True)
        except grpc.RpcError as error:
            hint = " (is the server running? start it with make serve)" if error.code() == grpc.StatusCode.UNAVAILABLE else ""
            print(f"error: {error.code().name}: {error.details()}{hint}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
