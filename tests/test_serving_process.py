"""``python -m serving.server`` as a process: start-up errors, and a graceful exit on SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from serving.stubs import translator_pb2 as pb
from serving.stubs import translator_pb2_grpc

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 60  # seconds: a bound on a broken server, never an expectation about speed
SOURCES = ["나는 학생입니다.", "그는 의사입니다.", "감사합니다.", "비가 옵니다.", "I am a student."]
EXPECTED = ["I am a student.", "He is a doctor.", "Thank you.", "It is raining.", "나는 학생입니다."]


def start_server(log: Path, *args: str) -> subprocess.Popen:
    with log.open("w") as stderr:
        return subprocess.Popen([sys.executable, "-m", "serving.server", *args], cwd=REPO, stderr=stderr,
                                stdout=subprocess.DEVNULL)


def wait_for_log_line(process: subprocess.Popen, log: Path, message: str) -> dict:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if line.startswith("{") and json.loads(line)["message"] == message:
                return json.loads(line)
        assert process.poll() is None, f"the server exited with {process.returncode}:\n{log.read_text()}"
        time.sleep(0.05)
    raise AssertionError(f"no {message!r} line in the server log:\n{log.read_text()}")


def queued_requests(metrics_port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=TIMEOUT) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("nmt_queued_requests "):
                return float(line.split()[1])
    raise AssertionError("the metrics have no nmt_queued_requests gauge")


@pytest.fixture
def server_process(tmp_path) -> Iterator[tuple[subprocess.Popen, Path]]:
    processes: list[subprocess.Popen] = []
    log = tmp_path / "server.log"

    def start(*args: str) -> subprocess.Popen:
        processes.append(start_server(log, *args))
        return processes[-1]

    yield start, log
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_sigterm_lets_in_flight_requests_finish_and_exits_0(server_process, fixture_model_dir):
    start, log = server_process
    # A long first request keeps the worker busy; without batching the requests arriving meanwhile queue behind
    # it until SIGTERM makes the server drain them.
    # 200 sentences: on a fast CPU 60 were decoded before the other requests had all queued, so the worker took one
    # of them between the count below and SIGTERM.
    process = start("--model", str(fixture_model_dir), "--device", "cpu", "--port", "0", "--metrics-port", "0",
                    "--http-port", "0", "--no-batching", "--max-text-tokens", "4096")
    serving = wait_for_log_line(process, log, "serving")
    long_text = " ".join([SOURCES[0]] * 200)
    with grpc.insecure_channel(f"127.0.0.1:{serving['port']}") as channel:
        stub = translator_pb2_grpc.TranslatorStub(channel)
        first = stub.Translate.future(pb.TranslateRequest(text=long_text, source_lang="ko", target_lang="en"), timeout=TIMEOUT)
        in_flight = [
            stub.Translate.future(pb.TranslateRequest(text=text, source_lang="ko" if i < 4 else "en",
                                                      target_lang="en" if i < 4 else "ko"), timeout=TIMEOUT)
            for i, text in enumerate(SOURCES)
        ]
        # Those that arrive while the worker is busy are queued; any that find it idle are answered.
        deadline = time.monotonic() + TIMEOUT
        while (queued := queued_requests(serving["metrics_port"])) < 1 or queued + sum(f.done() for f in in_flight) < len(SOURCES):
            assert time.monotonic() < deadline, "the requests never reached the queue"
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        assert first.result().translation == " ".join([EXPECTED[0]] * 200)
        assert [future.result().translation for future in in_flight] == EXPECTED
    assert process.wait(TIMEOUT) == 0
    # The worker may take a queued request between the last metrics read and the signal, never add one.
    assert 1 <= wait_for_log_line(process, log, "shutting down")["queued"] <= queued


def test_a_missing_model_stops_the_server_with_a_clear_error(server_process, tmp_path):
    start, log = server_process
    process = start("--model", str(tmp_path / "absent"), "--port", "0")
    assert process.wait(TIMEOUT) == 2
    assert f"error: no model at {tmp_path / 'absent'}; train one (make train) or pass --model DIR" in log.read_text()
