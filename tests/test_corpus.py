import gzip
import json
import socket
from pathlib import Path

import pytest
from datasets import Dataset

from training.corpus import load_corpus, load_monolingual
from training.recipe import CorpusSpec, corpus_path

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def no_network(monkeypatch):
    """Fail any test that tries to open a connection: the Hub path must work from local files alone."""

    def refuse(*args, **kwargs):
        raise AssertionError("a corpus loader tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def test_parallel_files_load_line_by_line():
    corpus = load_corpus(CorpusSpec(name="tiny", path="tiny"), FIXTURES)
    assert corpus.column_names == ["ko", "en"]
    assert len(corpus) == 40
    assert corpus[0] == {"ko": "나는 학생입니다.", "en": "I am a student."}


def test_parallel_lines_split_only_on_newlines(tmp_path):
    write_lines(tmp_path / "odd.ko", ["첫째\u2028줄", "둘째\x0c줄"])
    write_lines(tmp_path / "odd.en", ["first line", "second line"])
    corpus = load_corpus(CorpusSpec(name="odd", path="odd"), tmp_path)
    assert corpus["ko"] == ["첫째\u2028줄", "둘째\x0c줄"]


def test_parallel_files_of_different_lengths_are_refused(tmp_path):
    write_lines(tmp_path / "bad.ko", ["하나", "둘", "셋"])
    write_lines(tmp_path / "bad.en", ["one", "two"])
    with pytest.raises(ValueError, match=r"bad\.ko has 3, .*bad\.en has 2 lines"):
        load_corpus(CorpusSpec(name="bad", path="bad"), tmp_path)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nowhere\.ko does not exist"):
        load_corpus(CorpusSpec(name="gone", path="nowhere"), tmp_path)
    with pytest.raises(FileNotFoundError, match=r"nowhere\.tsv does not exist"):
        load_corpus(CorpusSpec(name="gone", path="nowhere.tsv", format="tsv"), tmp_path)


def test_tsv_reads_the_same_pairs_as_the_parallel_files():
    tsv = load_corpus(CorpusSpec(name="tiny", path="tiny.tsv", format="tsv"), FIXTURES)
    parallel = load_corpus(CorpusSpec(name="tiny", path="tiny"), FIXTURES)
    assert tsv.to_dict() == parallel.to_dict()


def test_tsv_columns_pick_positions_and_quotes_stay_text(tmp_path):
    # A CSV reader would strip the quotes and read NA as a missing value.
    lines = ['He said "hi".\t그가 "안녕"이라고 했다.\tsource-1', "NA\t없음\tsource-2"]
    write_lines(tmp_path / "en-ko.tsv", lines)
    spec = CorpusSpec(name="swapped", path="en-ko.tsv", format="tsv", columns={"ko": 1, "en": 0})
    corpus = load_corpus(spec, tmp_path)
    assert corpus.to_dict() == {"ko": ['그가 "안녕"이라고 했다.', "없음"], "en": ['He said "hi".', "NA"]}


def test_tsv_line_without_the_column_is_reported(tmp_path):
    write_lines(tmp_path / "short.tsv", ["하나\tone", "no tab here"])
    with pytest.raises(ValueError, match=r"short\.tsv:2: "):
        load_corpus(CorpusSpec(name="short", path="short.tsv", format="tsv"), tmp_path)


def test_jsonl_columns_map_keys_and_drop_the_rest():
    spec = CorpusSpec(name="extra", path="extra.jsonl", format="jsonl", columns={"ko": "korean", "en": "english"})
    corpus = load_corpus(spec, FIXTURES)
    assert corpus.column_names == ["ko", "en"]
    assert len(corpus) == 8
    assert corpus[0] == {"ko": "나는 산책을 좋아합니다.", "en": "I like walking."}


def test_jsonl_without_the_columns_says_what_it_has(tmp_path):
    (tmp_path / "other.jsonl").write_text(json.dumps({"src": "안녕", "tgt": "hi"}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"no columns .* \(it has \['src', 'tgt'\]\)"):
        load_corpus(CorpusSpec(name="other", path="other.jsonl", format="jsonl"), tmp_path)


def test_hub_dataset_with_translation_layout_from_a_local_directory(no_network):
    spec = CorpusSpec(name="standin", hub="hub-standin", format="hub", split="train")
    corpus = load_corpus(spec, FIXTURES)  # resolved under data_dir, as the tiny recipe does
    assert corpus.column_names == ["ko", "en"]
    assert len(corpus) == 6
    assert corpus[0] == {"ko": "나는 영화를 봅니다.", "en": "I watch a movie."}


def test_hub_dataset_with_named_columns_and_splits(tmp_path, no_network):
    rows = {"korean": ["안녕하세요", "고맙습니다"], "english": ["Hello", "Thanks"], "score": [0.9, 0.8]}
    (tmp_path / "standin" / "data").mkdir(parents=True)
    Dataset.from_dict(rows).to_parquet(str(tmp_path / "standin" / "data" / "validation-00000-of-00001.parquet"))
    Dataset.from_dict({k: v[:1] for k, v in rows.items()}).to_parquet(
        str(tmp_path / "standin" / "data" / "train-00000-of-00001.parquet")
    )
    spec = CorpusSpec(
        name="standin", hub=str(tmp_path / "standin"), format="hub", split="validation",
        columns={"ko": "korean", "en": "english"},
    )
    corpus = load_corpus(spec)
    assert corpus.to_dict() == {"ko": ["안녕하세요", "고맙습니다"], "en": ["Hello", "Thanks"]}


def test_unknown_format_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown format 'csv' .*parallel, tsv, jsonl, hub"):
        load_corpus(CorpusSpec(name="x", path="x.csv", format="csv"), FIXTURES)


def test_monolingual_text_plain_or_gzip_keeps_every_line_in_order(tmp_path):
    plain = FIXTURES / "mono.ko"
    expected = plain.read_text(encoding="utf-8").split("\n")[:-1]
    compressed = tmp_path / "mono.ko.gz"
    compressed.write_bytes(gzip.compress(plain.read_bytes()))
    for path in (plain, compressed):
        corpus = load_monolingual(path, "ko")
        assert corpus.column_names == ["ko"]
        assert list(corpus["ko"]) == expected
    assert "" in expected  # the fixture's empty line is a row, not skipped
    assert list(load_monolingual(compressed, "ko", limit=3)["ko"]) == expected[:3]
    assert len(load_monolingual(plain, "ko", limit=1000)) == len(expected)


def test_monolingual_lines_split_only_on_newlines(tmp_path):
    write_lines(tmp_path / "odd.en", ["first\u2028line", "second\x0cline"])
    assert list(load_monolingual(tmp_path / "odd.en", "en")["en"]) == ["first\u2028line", "second\x0cline"]


def test_monolingual_errors_name_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nowhere\.ko does not exist"):
        load_monolingual(tmp_path / "nowhere.ko", "ko")
    with pytest.raises(ValueError, match="'fr' is not one of ko, en"):
        load_monolingual(FIXTURES / "mono.ko", "fr")


def test_runs_and_absolute_paths_are_read_where_they_are(tmp_path):
    data_dir = Path("../shared/data")
    assert corpus_path(CorpusSpec(name="bt", path="runs/bt/kowiki/train"), data_dir) == Path("runs/bt/kowiki/train")
    assert corpus_path(CorpusSpec(name="jhe", path="jhe/train"), data_dir) == data_dir / "jhe/train"
    write_lines(tmp_path / "bt.ko", ["나는 학생입니다."])
    write_lines(tmp_path / "bt.en", ["I am a student."])
    corpus = load_corpus(CorpusSpec(name="bt", path=str(tmp_path / "bt")), FIXTURES)
    assert corpus.to_dict() == {"ko": ["나는 학생입니다."], "en": ["I am a student."]}
