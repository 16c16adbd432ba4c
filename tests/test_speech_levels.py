"""training.speech_levels: the speech levels of translations into Korean against their references, from eval reports."""

import json
from pathlib import Path

import pytest

from nmt.speech_level import SpeechLevel
from training.speech_levels import main

REFERENCES = ["저는 학생입니다.", "비가 옵니다.", "그는 학생이다.", "어디 가세요?"]
SOURCES = ["I am a student.", "It is raining.", "He is a student.", "Where are you going?"]


@pytest.fixture()
def recipe(tmp_path) -> Path:
    for lang, lines in (("en", SOURCES), ("ko", REFERENCES)):
        (tmp_path / f"dev.{lang}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    path = tmp_path / "recipe.yaml"
    path.write_text(f"name: levels\ndata_dir: {tmp_path}\ncorpora:\n  dev: [{{name: dev, path: dev}}]\n", encoding="utf-8")
    return path


def write_report(folder: Path, recipe: Path, hypotheses: list[str]) -> Path:
    """An eval report of en→ko hypotheses named relative to itself, as training.evaluate writes one."""
    folder.mkdir()
    (folder / "dev.en-ko.hyp").write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
    result = {"set": "dev", "split": "dev", "direction": "en-ko", "sentences": len(hypotheses), "primary_metric": "chrf",
              "hypotheses": "dev.en-ko.hyp"}
    report = {"recipe": {"name": "levels", "config": str(recipe)}, "limit": None, "results": [result]}
    (folder / "eval.json").write_text(json.dumps(report), encoding="utf-8")
    return folder / "eval.json"


def test_levels_of_references_and_hypotheses_and_the_gain_of_formal_endings(recipe, tmp_path, capsys):
    plain = write_report(tmp_path / "plain", recipe, ["저는 학생이다.", "비가 온다.", "그는 학생이다.", "어디 가세요?"])
    tables = main([str(plain)])
    (rows,) = tables.values()
    references, hypotheses = rows
    assert references.shares[SpeechLevel.FORMAL] == 0.5 and references.shares[SpeechLevel.PLAIN] == 0.25
    assert hypotheses.shares[SpeechLevel.PLAIN] == 0.75 and hypotheses.shares[SpeechLevel.POLITE] == 0.25
    # Made formal, the first two match their references; the third, plain in its reference too, no longer does.
    assert hypotheses.chrf_formal > hypotheses.chrf
    table = capsys.readouterr().out.splitlines()
    assert table[2] == "| dev en-ko | references | 50 | 25 | 25 | 0 |  |  |"
    assert table[3].startswith("| dev en-ko | eval | 0 | 25 | 75 | 0 | ")


def test_hypotheses_that_do_not_match_the_references_are_refused(recipe, tmp_path):
    short = write_report(tmp_path / "short", recipe, ["저는 학생이다."])
    with pytest.raises(SystemExit):
        main([str(short)])
