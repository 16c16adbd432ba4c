"""nmt.budget: the CPU keeps its tuned batch sizes, a GPU gets large ones, and every entry point uses them."""

import io

import torch

import nmt.translate
from nmt.budget import CPU_BUDGET, GPU_BUDGET, decoding_budget
from nmt.translator import Translator


def test_the_cpu_keeps_the_tuned_values_and_a_gpu_gets_far_larger_ones():
    assert (CPU_BUDGET.max_batch_tokens, CPU_BUDGET.lines_per_call) == (4096, 64)
    assert decoding_budget("cpu") == decoding_budget(torch.device("cpu")) == CPU_BUDGET
    assert decoding_budget("cuda") == decoding_budget(torch.device("cuda", 1)) == GPU_BUDGET
    assert GPU_BUDGET.max_batch_tokens >= 16 * CPU_BUDGET.max_batch_tokens
    assert GPU_BUDGET.lines_per_call >= 16 * CPU_BUDGET.lines_per_call


def test_the_translator_takes_its_device_budget_unless_told(fixture_translator):
    model, tokenizer, metadata = fixture_translator.model, fixture_translator.tokenizer, fixture_translator.metadata
    assert Translator(model, tokenizer, metadata).max_batch_tokens == CPU_BUDGET.max_batch_tokens
    assert Translator(model, tokenizer, metadata, max_batch_tokens=100).max_batch_tokens == 100


def test_the_cli_reads_the_device_budget_of_lines_per_call(fixture_model_dir, monkeypatch, capsys):
    calls: list[int] = []
    original = Translator.translate

    def counting(self, texts, *args):
        calls.append(len(texts))
        return original(self, texts, *args)

    monkeypatch.setattr(Translator, "translate", counting)
    lines = CPU_BUDGET.lines_per_call + 3
    monkeypatch.setattr("sys.stdin", io.StringIO("나는 학생입니다.\n" * lines))
    assert nmt.translate.main(["--model", str(fixture_model_dir), "--source-lang", "ko", "--target-lang", "en",
                               "--device", "cpu", "--beam-size", "1"]) == 0
    assert calls == [CPU_BUDGET.lines_per_call, 3]
    assert capsys.readouterr().out.count("\n") == lines
