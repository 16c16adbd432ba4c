"""On a CUDA GPU: decoding gives the CPU's outputs, bf16 stays close to fp32, training steps and resumes exactly,
and the server answers from the GPU. Every test here is marked ``cuda`` and skips where no GPU is present
(``pytest -m cuda`` runs just these; bench/cuda_session.sh runs them on a GPU machine)."""

from __future__ import annotations

import os

# Deterministic cuBLAS for the exact-resume test; it must be set before CUDA starts.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import grpc  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from fixture_model import fixture_pairs, train_fixture_tokenizer  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from test_serving_process import server_process, wait_for_log_line  # noqa: E402, F401
from test_trainer import make_trainer  # noqa: E402

from nmt.budget import GPU_BUDGET  # noqa: E402
from nmt.search import SearchOptions  # noqa: E402
from nmt.translator import Translator  # noqa: E402

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none is available here"),
]
KOREAN, ENGLISH = (list(side) for side in zip(*fixture_pairs()))


def translations(translator: Translator, beam_size: int) -> list[str]:
    options = SearchOptions(beam_size=beam_size)
    return ([t.text for t in translator.translate(KOREAN, "ko", "en", options)]
            + [t.text for t in translator.translate(ENGLISH, "en", "ko", options)])


@pytest.fixture(scope="module")
def cpu_translator(fixture_model_dir) -> Translator:
    return Translator.load(fixture_model_dir, "cpu")


@pytest.mark.parametrize("beam_size", [1, 4], ids=["greedy", "beam"])
def test_the_gpu_decodes_what_the_cpu_decodes(fixture_model_dir, cpu_translator, beam_size):
    gpu = Translator.load(fixture_model_dir, "cuda")
    assert gpu.device.type == "cuda" and gpu.max_batch_tokens == GPU_BUDGET.max_batch_tokens
    assert translations(gpu, beam_size) == translations(cpu_translator, beam_size)


def test_bf16_on_the_gpu_is_all_bf16_and_keeps_most_translations(fixture_model_dir, cpu_translator):
    bf16 = Translator.load(fixture_model_dir, "cuda", precision="bf16")
    assert {p.dtype for p in bf16.inference_model.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in bf16.model.parameters()} == {torch.float32}  # the trained model is left as it was
    expected, actual = translations(cpu_translator, 4), translations(bf16, 4)
    assert sum(a == e for a, e in zip(actual, expected)) >= 0.9 * len(expected)


def cuda_trainer(run_dir, tokenizer, **overrides):
    return make_trainer(run_dir, tokenizer, device="cuda", **overrides)


def test_a_training_step_on_the_gpu_uses_bf16_autocast_and_fused_adamw(tmp_path):
    trainer = cuda_trainer(tmp_path, train_fixture_tokenizer())
    assert trainer.bf16 and trainer.optimizer.defaults["fused"] is True
    batch = [trainer.batch(torch.arange(8).numpy())]
    assert batch[0].source.is_pinned()
    first = trainer.update(batch).read()
    for _ in range(5):
        trainer.update(batch)
    assert trainer.update(batch).read()["loss"] < first["loss"]
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}


def test_resuming_on_the_gpu_is_exact(tmp_path):
    """10 steps straight == 5 steps, a new trainer, 5 more from the checkpoint (deterministic kernels, math attention)."""
    tokenizer = train_fixture_tokenizer()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with sdpa_kernel(SDPBackend.MATH):
            straight = cuda_trainer(tmp_path / "straight", tokenizer, max_steps=10, save_every=5, eval_every=1000)
            straight.resume()
            straight.fit()
            first = cuda_trainer(tmp_path / "split", tokenizer, max_steps=5, save_every=5, eval_every=1000)
            first.resume()
            first.fit()
            torch.manual_seed(1234)
            second = cuda_trainer(tmp_path / "split", tokenizer, max_steps=10, save_every=5, eval_every=1000)
            assert second.resume() and second.progress.step == 5
            second.fit()
    finally:
        torch.use_deterministic_algorithms(False)
    expected = load_file(tmp_path / "straight" / "checkpoints" / "step-00000010" / "model.safetensors")
    actual = load_file(tmp_path / "split" / "checkpoints" / "step-00000010" / "model.safetensors")
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name


def test_the_server_on_cuda_answers_and_says_so(server_process, fixture_model_dir):
    from serving.stubs import translator_pb2 as pb
    from serving.stubs import translator_pb2_grpc

    start, log = server_process
    process = start("--model", str(fixture_model_dir), "--device", "cuda", "--port", "0", "--http-port", "0")
    serving = wait_for_log_line(process, log, "serving")
    assert serving["device"].startswith("cuda")
    with grpc.insecure_channel(f"127.0.0.1:{serving['port']}") as channel:
        stub = translator_pb2_grpc.TranslatorStub(channel)
        info = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=60)
        answer = stub.Translate(pb.TranslateRequest(text=KOREAN[0], source_lang="ko", target_lang="en"), timeout=60)
    assert info.device.startswith("cuda")
    assert answer.translation == ENGLISH[0]
