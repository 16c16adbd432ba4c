"""`training.backtranslate` on the fixture model: order and counts kept, resumable shards, seeded sampling, torchrun."""

from __future__ import annotations

import dataclasses
import gzip
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixture_model import model_from_before_the_tag
from nmt.search import SearchOptions, search
from nmt.translator import Translator
from training.backtranslate import (
    RECORD,
    SHARED,
    BacktranslationConfig,
    backtranslate,
    shard_dir,
    shard_ranges,
    shard_seed,
    shards_of_rank,
)

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def korean_config(model_dir: Path, out: Path, **overrides) -> BacktranslationConfig:
    settings = {"input": FIXTURES / "mono.ko", "lang": "ko", "shard_size": 5, "device": "cpu", **overrides}
    return BacktranslationConfig(model=model_dir, out=out, **settings)


def command(config: BacktranslationConfig) -> list[str]:
    return [sys.executable, "-m", "training.backtranslate", "--model", str(config.model), "--input", str(config.input),
            "--lang", config.lang, "--out", str(config.out), "--shard-size", str(config.shard_size),
            "--device", "cpu", "--threads", "1", "--no-progress-bar"]


def environment() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def same_files(first: Path, second: Path) -> bool:
    return all((first / name).read_bytes() == (second / name).read_bytes() for name in ("train.ko", "train.en"))


@pytest.fixture(scope="module")
def korean_run(fixture_model_dir, tmp_path_factory):
    """mono.ko (16 sentences of the fixture corpus and an empty line) back-translated once: (config, record)."""
    config = korean_config(fixture_model_dir, tmp_path_factory.mktemp("bt") / "mono-ko")
    return config, backtranslate(config, progress_bar=False)


def test_pairs_keep_the_input_order_with_the_real_text_on_its_side(korean_run):
    config, record = korean_run
    source = read_lines(FIXTURES / "mono.ko")
    korean, english = read_lines(config.out / "train.ko"), read_lines(config.out / "train.en")
    assert korean == [line for line in source if line]  # the empty line is the one dropped
    assert len(english) == len(korean) == 16
    assert english[:12] == read_lines(FIXTURES / "tiny.en")[:12]  # the fixture model knows these sentences
    assert (record["real"], record["synthetic"], record["shards"]) == ("ko", "en", 4)
    assert record["counts"] == {"read": 17, "kept": 16, "dropped": {"empty": 1}}
    assert record["model"]["name"] == "fixture-tiny" and record["settings"]["search"] == "beam"
    assert record["sentences_per_second"] > 0


def test_compressed_english_with_a_limit(fixture_model_dir, tmp_path):
    compressed = tmp_path / "mono.en.gz"
    compressed.write_bytes(gzip.compress((FIXTURES / "mono.en").read_bytes()))
    config = BacktranslationConfig(model=fixture_model_dir, input=compressed, lang="en", out=tmp_path / "out",
                                   limit=7, search="greedy", device="cpu")
    record = backtranslate(config, progress_bar=False)
    assert record["counts"]["read"] == 7 and record["synthetic"] == "ko"
    assert read_lines(config.out / "train.en") == read_lines(FIXTURES / "mono.en")[:7]
    assert read_lines(config.out / "train.ko") == read_lines(FIXTURES / "mono.ko")[:7]


def test_killed_run_resumes_to_identical_files(fixture_model_dir, korean_run, tmp_path):
    """kill -9 once the first shard is on disk; the same command then finishes the rest."""
    config, _ = korean_run
    longer = tmp_path / "longer.ko"
    longer.write_text((FIXTURES / "mono.ko").read_text(encoding="utf-8") * 4, encoding="utf-8")
    killed = korean_config(fixture_model_dir, tmp_path / "killed", input=longer, shard_size=1)
    process = subprocess.Popen(command(killed), cwd=ROOT, env=environment(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not shard_dir(killed.out, 0).is_dir():
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() < deadline, "no shard was written"
        time.sleep(0.002)
    process.kill()
    process.wait(timeout=60)
    written = sorted(path.name for path in (killed.out / "shards").iterdir() if not path.name.startswith("."))
    assert 1 <= len(written) - 1 < 68, "the run finished before it could be killed"  # minus plan.json
    assert not (killed.out / RECORD).exists()

    subprocess.run(command(killed), cwd=ROOT, env=environment(), check=True, capture_output=True, timeout=300)
    uninterrupted = dataclasses.replace(killed, out=tmp_path / "uninterrupted")
    backtranslate(uninterrupted, progress_bar=False)
    assert same_files(killed.out, uninterrupted.out)
    assert len(read_lines(killed.out / "train.ko")) == 64
    assert not [path for path in (killed.out / "shards").iterdir() if path.name.endswith(".partial")]


def test_lost_shards_and_a_half_written_one_are_redone_identically(korean_run, tmp_path):
    config, record = korean_run
    copy = dataclasses.replace(config, out=tmp_path / "copy")
    shutil.copytree(config.out, copy.out)
    for index in (1, 3):
        shutil.rmtree(shard_dir(copy.out, index))
    half = shard_dir(copy.out, 1).with_name(".00001.partial")
    half.mkdir()
    (half / "train.ko").write_text("반쯤\n", encoding="utf-8")
    (copy.out / "train.ko").write_text("stale\n", encoding="utf-8")
    assert backtranslate(copy, progress_bar=False)["counts"] == record["counts"]
    assert same_files(config.out, copy.out)
    assert not half.exists()


def test_other_settings_do_not_mix_with_existing_shards(korean_run):
    config, _ = korean_run
    with pytest.raises(SystemExit, match="shard_size"):
        backtranslate(dataclasses.replace(config, shard_size=4), progress_bar=False)


def test_sampling_is_reproducible_per_seed(fixture_model_dir, tmp_path):
    def sampled(name: str, seed: int) -> list[str]:
        config = korean_config(fixture_model_dir, tmp_path / name, search="sample", temperature=3.0, seed=seed)
        backtranslate(config, progress_bar=False)
        return read_lines(config.out / "train.en")

    first = sampled("first", seed=1)
    assert sampled("again", seed=1) == first
    assert sampled("other", seed=2) != first


def test_torchrun_two_processes_write_what_one_does(korean_run, tmp_path):
    config, _ = korean_run
    torchrun = Path(sys.executable).with_name("torchrun")
    out = tmp_path / "ddp"
    arguments = command(dataclasses.replace(config, out=out))[1:]  # without the interpreter
    result = subprocess.run([str(torchrun), "--standalone", "--nproc_per_node=2", *arguments], cwd=ROOT,
                            env=environment(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert same_files(config.out, out)
    assert result.stdout.count("read 17, kept 16") == 1  # rank 0 alone assembles and reports


def test_shards_are_cut_once_and_shared_out_round_robin():
    assert shard_ranges(12, 5) == [range(0, 5), range(5, 10), range(10, 12)]
    assert shard_ranges(0, 5) == []
    split = [list(shards_of_rank(7, rank, 3)) for rank in range(3)]
    assert split == [[0, 3, 6], [1, 4], [2, 5]]
    assert sorted(index for share in split for index in share) == list(range(7))


def test_each_shard_has_its_own_stable_seed():
    assert shard_seed(0, 1) == shard_seed(0, 1)
    assert len({shard_seed(seed, index) for seed in (0, 1) for index in range(50)}) == 100


def test_outputs_never_go_into_shared(fixture_model_dir):
    with pytest.raises(ValueError, match="write synthetic corpora under runs/"):
        korean_config(fixture_model_dir, SHARED / "mono" / "bt")


def test_decoding_never_predicts_the_tag(fixture_translator):
    """The Translator adds <bt> (with PAD and BOS) to the banned ids of every search, whatever the caller asked for."""
    seen = []

    def spy(model, source, bos_id, eos_id, options):
        seen.append(options.banned_ids)
        return [[] for _ in range(source.size(0))]

    tokenizer = fixture_translator.tokenizer
    sources = [tokenizer.source_ids("나는 학생입니다.", "en")]
    fixture_translator.search_ids(sources, SearchOptions(), spy)
    fixture_translator.search_ids(sources, SearchOptions(banned_ids=(tokenizer.unk_id,)), spy)
    always = (tokenizer.pad_id, tokenizer.bos_id, tokenizer.bt_id)
    assert seen == [always, (tokenizer.unk_id, *always)]


def test_model_from_before_the_tag_decodes_as_before(fixture_translator):
    """A model without a <bt> piece (the first release): only PAD and BOS are banned, which search bans anyway, so
    it translates exactly as a plain search with the caller's options."""
    old = Translator(*model_from_before_the_tag(fixture_translator.model, fixture_translator.tokenizer), metadata={})
    seen = []

    def spy(model, source, bos_id, eos_id, options):
        seen.append(options)
        return search(model, source, bos_id, eos_id, options)

    assert old.tokenizer.bt_id is None
    options = SearchOptions(beam_size=2)
    hypotheses = old.translate_sentences(["나는 학생입니다."], "en", options, spy)
    assert [seen_options.banned_ids for seen_options in seen] == [(old.tokenizer.pad_id, old.tokenizer.bos_id)]
    tokenizer = old.tokenizer
    plain = search(old.inference_model, old.pad([tokenizer.source_ids("나는 학생입니다.", "en")]), tokenizer.bos_id, tokenizer.eos_id, options)
    assert [h.tokens for h in hypotheses[0]] == [h.tokens for h in plain[0]]
    assert old.tokenizer.decode(hypotheses[0][0].tokens)
