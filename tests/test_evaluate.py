"""training.evaluate: scores agree with sacrebleu, and the CLI writes a complete, line-aligned report."""

import json

import pytest
from fixture_model import fixture_pairs, level_fixture_rows
from sacrebleu.metrics import BLEU, CHRF

from nmt.translator import UnsupportedSpeechLevel
from training.evaluate import EvaluationError, main, number_counts, read_parallel, score

ENGLISH_HYPOTHESES = ["The cat sat on the mat.", "A dog barked loudly"]
ENGLISH_REFERENCES = ["The cat sat on the mat.", "The dog barked loudly."]
KOREAN_HYPOTHESES = ["나는 학생 입니다.", "그는 의사예요."]
KOREAN_REFERENCES = ["나는 학생입니다.", "그는 의사입니다."]


@pytest.mark.parametrize(
    "hypotheses, references, target_lang, tokenize",
    [(ENGLISH_HYPOTHESES, ENGLISH_REFERENCES, "en", "13a"), (KOREAN_HYPOTHESES, KOREAN_REFERENCES, "ko", "char")],
)
def test_score_matches_sacrebleu(hypotheses, references, target_lang, tokenize):
    scores = score(hypotheses, references, target_lang)
    bleu, chrf = BLEU(tokenize=tokenize), CHRF()
    assert scores["bleu"] == bleu.corpus_score(hypotheses, [references]).score
    assert scores["chrf"] == chrf.corpus_score(hypotheses, [references]).score
    assert f"tok:{tokenize}" in scores["bleu_signature"]
    assert scores["chrf_signature"] == str(chrf.get_signature())


def test_korean_bleu_ignores_word_spacing():
    assert score(["나는 학생 입니다."], ["나는 학생입니다."], "ko")["bleu"] == pytest.approx(100.0)


def test_score_requires_one_hypothesis_per_reference():
    with pytest.raises(EvaluationError, match="1 hypotheses for 2 references"):
        score(["one"], ["one", "two"], "en")


def test_number_counts_sum_each_lines_missing_and_invented_numbers():
    sources, hypotheses = ["356년 7월", "3 cats", "no number"], ["in July 2156", "3 cats", "1 dog"]
    assert number_counts(sources, hypotheses) == {"in_sources": 3, "missing": 2, "invented": 2}


def test_read_parallel_rejects_misaligned_files(tmp_path):
    (tmp_path / "dev.ko").write_text("하나\n둘\n", encoding="utf-8")
    (tmp_path / "dev.en").write_text("one\n", encoding="utf-8")
    with pytest.raises(EvaluationError, match="has 2 lines but"):
        read_parallel(tmp_path / "dev", "ko", "en")


def write_parallel(prefix, pairs):
    for index, lang in enumerate(("ko", "en")):
        prefix.with_name(f"{prefix.name}.{lang}").write_text("".join(pair[index] + "\n" for pair in pairs), encoding="utf-8")


@pytest.fixture()
def tiny_recipe(tmp_path):
    pairs = fixture_pairs()
    write_parallel(tmp_path / "tiny-dev", pairs[:6])
    write_parallel(tmp_path / "tiny-test", pairs[6:12])
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(
        f"name: tiny\ndata_dir: {tmp_path}\ncorpora:\n"
        "  dev: [{name: tiny-dev, path: tiny-dev}]\n"
        "  test: [{name: tiny-test, path: tiny-test}]\n",
        encoding="utf-8",
    )
    return recipe


def test_cli_reports_every_set_and_direction(tiny_recipe, fixture_model_dir, tmp_path, capsys):
    out = tmp_path / "report" / "eval.json"
    main(["--config", str(tiny_recipe), "--model", str(fixture_model_dir), "--out", str(out), "--device", "cpu"])

    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["model"]["name"] == "fixture-tiny"
    assert {pair: d["beam_size"] for pair, d in report["decoding"]["directions"].items()} == {"ko-en": 4, "en-ko": 4}
    found = {(r["set"], r["direction"]): r for r in report["results"]}
    assert set(found) == {(s, d) for s in ("tiny-dev", "tiny-test") for d in ("ko-en", "en-ko")}
    for (name, direction), result in found.items():
        assert result["sentences"] == 6
        assert result["bleu"] > 80 and result["chrf"] > 80  # the fixture model memorised these pairs
        assert "tok:13a" in result["bleu_signature"] if direction.endswith("en") else "tok:char" in result["bleu_signature"]
        assert "nc:6" in result["chrf_signature"]
        assert result["hypotheses"] == f"eval/{name}.{direction}.hyp"  # relative to the report, so the two travel together
        hypotheses = (tmp_path / "report" / result["hypotheses"]).read_text(encoding="utf-8")
        assert hypotheses.count("\n") == 6
    printed = capsys.readouterr().out
    assert "tiny-test" in printed and str(out) in printed


def test_cli_filters_sets_and_directions(tiny_recipe, fixture_model_dir, tmp_path):
    out = tmp_path / "dev-only.json"
    report = main(
        ["--config", str(tiny_recipe), "--model", str(fixture_model_dir), "--out", str(out), "--device", "cpu",
         "--sets", "tiny-dev", "--directions", "ko-en", "--limit", "3", "--beam-size", "2", "--length-penalty", "0.6"]
    )
    assert [(r["set"], r["direction"], r["sentences"]) for r in report["results"]] == [("tiny-dev", "ko-en", 3)]
    assert list(report["decoding"]["directions"]) == ["ko-en"]
    assert (report["decoding"]["directions"]["ko-en"]["beam_size"], report["decoding"]["directions"]["ko-en"]["length_penalty"]) == (2, 0.6)
    assert (tmp_path / "dev-only" / "tiny-dev.ko-en.hyp").is_file()


def test_cli_evaluates_a_chosen_precision_and_records_it(tiny_recipe, fixture_model_dir, tmp_path):
    report = main(["--config", str(tiny_recipe), "--model", str(fixture_model_dir), "--out", str(tmp_path / "int8.json"),
                   "--device", "cpu", "--sets", "tiny-dev", "--directions", "ko-en", "--int8"])
    assert report["decoding"]["precision"] == "int8"
    assert report["results"][0]["bleu"] > 90  # the fixture model translates its own dev set, quantised or not


def test_cli_rejects_unknown_sets(tiny_recipe, fixture_model_dir):
    with pytest.raises(EvaluationError, match="unknown evaluation sets nope"):
        main(["--config", str(tiny_recipe), "--model", str(fixture_model_dir), "--sets", "nope", "--device", "cpu"])


@pytest.fixture()
def level_recipe(tmp_path):
    """The level fixture's English with its plain Korean as the reference."""
    rows = level_fixture_rows()
    write_parallel(tmp_path / "levels-dev", [(row["plain"], row["en"]) for row in rows])
    recipe = tmp_path / "levels.yaml"
    recipe.write_text(f"name: levels\ndata_dir: {tmp_path}\ncorpora:\n  dev: [{{name: levels-dev, path: levels-dev}}]\n",
                      encoding="utf-8")
    return recipe


def test_a_speech_level_is_asked_of_the_directions_into_korean_only(level_recipe, level_model_dir, tmp_path):
    def evaluate(*level: str) -> dict:
        report = main(["--config", str(level_recipe), "--model", str(level_model_dir), "--device", "cpu",
                       "--out", str(tmp_path / f"{level}.json"), *(["--speech-level", *level] if level else [])])
        return {result["direction"]: result for result in report["results"]} | {"decoding": report["decoding"]}

    untagged, plain = evaluate(), evaluate("plain")
    assert plain["decoding"]["directions"]["en-ko"]["speech_level"] == "plain"
    assert plain["decoding"]["directions"]["ko-en"]["speech_level"] is None
    assert plain["en-ko"]["chrf"] == 100.0 > untagged["en-ko"]["chrf"]  # the references are plain, untagged is formal
    assert plain["ko-en"]["bleu"] == untagged["ko-en"]["bleu"]


def test_a_level_asked_of_a_model_without_level_tags_is_refused(tiny_recipe, fixture_model_dir):
    with pytest.raises(UnsupportedSpeechLevel, match="trained without speech-level tags"):
        main(["--config", str(tiny_recipe), "--model", str(fixture_model_dir), "--device", "cpu", "--speech-level", "formal"])
