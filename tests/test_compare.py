"""training.compare: paired significance between eval reports, rescored from their hypothesis files."""

import json
import shutil
from pathlib import Path

import pytest
from fixture_model import fixture_pairs

from training.compare import Comparison, Difference, compare, load_report, main, markdown_table
from training.evaluate import score


@pytest.fixture()
def recipe(tmp_path) -> Path:
    """One dev set of every fixture pair."""
    for index, lang in enumerate(("ko", "en")):
        (tmp_path / f"dev.{lang}").write_text("".join(pair[index] + "\n" for pair in fixture_pairs()), encoding="utf-8")
    path = tmp_path / "recipe.yaml"
    path.write_text(f"name: pairs\ndata_dir: {tmp_path}\ncorpora:\n  dev: [{{name: dev, path: dev}}]\n", encoding="utf-8")
    return path


def write_report(folder: Path, recipe: Path, hypotheses: list[str], limit: int | None = None) -> Path:
    """An eval report of ko→en hypotheses, as training.evaluate writes one: it names them relative to itself."""
    folder.mkdir()
    (folder / "dev.ko-en.hyp").write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
    references = [en for _, en in fixture_pairs()][:limit]
    result = {"set": "dev", "split": "dev", "direction": "ko-en", "sentences": len(hypotheses), "primary_metric": "bleu",
              **score(hypotheses, references, "en"), "hypotheses": "dev.ko-en.hyp"}
    report = {"recipe": {"name": "pairs", "config": str(recipe)}, "limit": limit, "results": [result]}
    (folder / "eval.json").write_text(json.dumps(report), encoding="utf-8")
    return folder / "eval.json"


def damaged(references: list[str], parity: int = 1) -> list[str]:
    """Every other sentence (odd ones, or even ones with ``parity=0``) loses its last word."""
    return [" ".join(r.split()[:-1]) if i % 2 == parity else r for i, r in enumerate(references)]


def test_a_clear_gain_is_significant_and_a_change_of_errors_is_not(recipe, tmp_path):
    references = [en for _, en in fixture_pairs()]
    systems = [("base", damaged(references)), ("other", damaged(references, parity=0)), ("fixed", references)]
    reports = [(name, load_report(write_report(tmp_path / name, recipe, hypotheses))) for name, hypotheses in systems]
    (comparison,) = compare(reports)
    other, fixed = comparison.differences
    assert comparison.metric == "bleu" and comparison.sentences == len(references)
    assert comparison.baseline == pytest.approx(reports[0][1]["results"][0]["bleu"], abs=0.01)  # rescored as evaluate did
    assert abs(other.delta) < 5 and other.p_value > 0.05  # as many errors, in other sentences
    assert (other.changed, fixed.changed) == (len(references), len(references) // 2)  # damaged in every / every other one
    assert fixed.score == pytest.approx(100) and fixed.delta > 10 and fixed.p_value < 0.05


def test_identical_hypotheses_are_no_evidence_of_a_difference(recipe, tmp_path):
    hypotheses = damaged([en for _, en in fixture_pairs()])
    reports = [(name, load_report(write_report(tmp_path / name, recipe, hypotheses))) for name in ("base", "same")]
    (comparison,) = compare(reports)
    (same,) = comparison.differences
    assert same.delta == 0 and same.p_value == 1.0 and same.changed == 0


def test_reports_of_different_lengths_are_refused(recipe, tmp_path):
    references = [en for _, en in fixture_pairs()]
    short = load_report(write_report(tmp_path / "short", recipe, references[:10], limit=10))
    full = load_report(write_report(tmp_path / "full", recipe, references))
    with pytest.raises(ValueError, match="different numbers of lines"):
        compare([("full", full), ("short", short)])


def test_cli_prints_a_markdown_table(recipe, tmp_path, capsys):
    references = [en for _, en in fixture_pairs()]
    base, fixed = write_report(tmp_path / "base", recipe, damaged(references)), write_report(tmp_path / "fixed", recipe, references)
    main([str(base), str(fixed), "--samples", "200"])
    table = capsys.readouterr().out.splitlines()
    assert table[0] == "| set | direction | metric | sentences | eval | eval (Δ, p, changed) |"
    assert table[2].startswith(f"| dev | ko-en | bleu | {len(references)} |") and "100.00 (+" in table[2]


def test_the_table_ends_with_the_mean_of_the_primary_metrics_and_how_many_rose():
    comparisons = [Comparison("a", "ko-en", "bleu", 10, 30.0, [Difference("new", 31.0, 1.0, 0.2, 4)]),
                   Comparison("b", "en-ko", "chrf", 10, 20.0, [Difference("new", 19.5, -0.5, 0.4, 3)]),
                   Comparison("c", "ko-en", "bleu", 10, 10.0, [Difference("new", 10.0, 0.0, 1.0, 0)])]
    *_, mean = markdown_table(comparisons, "old").splitlines()
    assert mean == "| mean |  | primary |  | 20.00 | 20.17 (+0.17, higher on 1 of 3) |"


def test_cli_names_a_missing_report(recipe, tmp_path, capsys):
    base = write_report(tmp_path / "base", recipe, [en for _, en in fixture_pairs()])
    with pytest.raises(SystemExit):
        main([str(base), str(tmp_path / "absent.json")])
    assert f"no such report: {tmp_path / 'absent.json'}" in capsys.readouterr().err


def test_cli_names_a_report_whose_hypotheses_are_gone(recipe, tmp_path, capsys):
    references = [en for _, en in fixture_pairs()]
    base, fixed = write_report(tmp_path / "base", recipe, damaged(references)), write_report(tmp_path / "fixed", recipe, references)
    (tmp_path / "fixed" / "dev.ko-en.hyp").unlink()  # a report copied without its hypotheses folder
    with pytest.raises(SystemExit):
        main([str(base), str(fixed)])
    assert f"evaluation file {tmp_path / 'fixed' / 'dev.ko-en.hyp'} does not exist" in capsys.readouterr().err


def test_a_report_moved_with_its_hypotheses_still_compares(recipe, tmp_path, capsys):
    references = [en for _, en in fixture_pairs()]
    base, fixed = write_report(tmp_path / "base", recipe, damaged(references)), write_report(tmp_path / "fixed", recipe, references)
    shutil.copytree(tmp_path / "fixed", tmp_path / "results" / "fixed")  # as into bench/results
    shutil.rmtree(tmp_path / "fixed")
    (comparison,) = main([str(base), str(tmp_path / "results" / "fixed" / "eval.json")])
    assert comparison.differences[0].score == pytest.approx(100)


def test_a_report_written_before_relative_paths_reads_its_hypotheses_from_the_working_directory(recipe, tmp_path, monkeypatch):
    report_path = write_report(tmp_path / "old", recipe, [en for _, en in fixture_pairs()])
    report = json.loads(report_path.read_text())
    report["results"][0]["hypotheses"] = "old/dev.ko-en.hyp"  # as reports named them: from where evaluate ran
    report_path.write_text(json.dumps(report), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert load_report(report_path)["results"][0]["hypotheses"] == "old/dev.ko-en.hyp"
