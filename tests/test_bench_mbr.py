"""bench.mbr: the MBR choice is the consensus under the model's posterior; the benchmark scores MAP and MBR choices."""

import json

import pytest
from fixture_model import fixture_pairs, write_fixture_dev_set

from bench.mbr import main, mbr_choice, oracle_choice, utilities
from training.evaluate import score


def shared_words(hypothesis: str, reference: str) -> float:
    """A toy utility: the share of the reference's words the hypothesis holds, out of 100."""
    words = reference.split()
    return 100 * sum(w in hypothesis.split() for w in words) / len(words)


def test_equal_scores_pick_the_candidate_closest_to_the_others():
    candidates = ["the cat sat", "a dog ran far", "the cat sat down"]
    assert mbr_choice(candidates, [0.0, 0.0, 0.0], shared_words) == 2  # holds all of "the cat sat" and its own words


def test_a_candidate_the_model_is_sure_of_outweighs_the_consensus():
    candidates = ["the cat sat", "a dog ran far", "the cat sat down"]
    assert mbr_choice(candidates, [-10.0, 0.0, -10.0], shared_words) == 1


def test_the_oracle_picks_the_candidate_closest_to_the_reference_whatever_the_model_thinks():
    chrf = utilities("en")["chrf"]
    assert oracle_choice(["a dog ran", "the cat sat down", "the cat sat"], "the cat sat", chrf) == 2
    assert oracle_choice(["same", "same"], "same", chrf) == 0


@pytest.mark.parametrize("target_lang", ["en", "ko"])
def test_the_utilities_are_sentence_scores_of_the_corpus_metrics(target_lang):
    hypothesis, reference = ("The cat sat.", "The cat sat down.") if target_lang == "en" else ("나는 학생이다.", "나는 학생입니다.")
    chosen = utilities(target_lang)
    assert chosen["chrf"](reference, reference) == pytest.approx(100.0) == chosen["bleu"](reference, reference)
    assert 0 < chosen["chrf"](hypothesis, reference) < 100
    assert chosen["chrf"](hypothesis, reference) == pytest.approx(score([hypothesis], [reference], target_lang)["chrf"])


def test_the_benchmark_scores_map_and_mbr_at_each_beam(fixture_model_dir, tmp_path):
    dev = write_fixture_dev_set(tmp_path / "dev.jsonl")
    out = tmp_path / "mbr.json"
    assert main(["--model", str(fixture_model_dir), "--dev", str(dev), "--beam-sizes", "1", "3", "--threads", "1",
                 "--out", str(out)]) == 0
    rows = json.loads(out.read_text(encoding="utf-8"))["rows"]
    assert [(r["set"], r["direction"], r["beam_size"]) for r in rows] == [("fixture", "ko-en", 1), ("fixture", "ko-en", 3)]
    assert all(r["sentences"] == len(fixture_pairs()) and set(r["choices"]) == {"map", "mbr-chrf", "mbr-bleu", "oracle"}
               for r in rows)
    one_candidate = rows[0]["choices"]
    assert one_candidate["map"] == one_candidate["mbr-chrf"] == one_candidate["mbr-bleu"] == one_candidate["oracle"]  # a single candidate is every choice
    assert rows[1]["choices"]["map"]["bleu"] > 90  # the fixture model has learnt its pairs
