"""training.tune_decoding: the grid runs on dev sets only, per direction; the choice lands in metadata.json, and every entry point
(Translator, server validation, CLI, evaluate) decodes with the model's tuned defaults unless told otherwise."""

import json
import shutil

import pytest
from test_evaluate import tiny_recipe  # noqa: F401 (a fixture)

from nmt.search import SearchOptions
from nmt.translator import Translator, UnsupportedLanguagePair
from serving.config import Limits
from serving.stubs import translator_pb2
from serving.validation import RequestValidator
from training import evaluate, tune_decoding
from training.evaluate import evaluation_sets
from training.recipe import load_recipe
from training.tune_decoding import (
    EVEN,
    ReusingTranslator,
    Setting,
    Trial,
    best,
    fewest_invented_numbers,
    loops_in,
    parse_set_weights,
    run_trial,
    weighted_objective,
)

TUNED = {"length_penalty": 0.6, "no_repeat_ngram_size": 3}
TUNED_EN_KO = {"length_penalty": 2.0}  # en→ko's own α (its n-gram ban is the shared one)


def with_decoding(fixture_model_dir, folder, decoding: dict):
    model_dir = shutil.copytree(fixture_model_dir, folder)
    metadata = json.loads((model_dir / "metadata.json").read_text(encoding="utf-8"))
    (model_dir / "metadata.json").write_text(json.dumps({**metadata, "decoding": decoding}), encoding="utf-8")
    return model_dir


@pytest.fixture()
def tuned_model_dir(fixture_model_dir, tmp_path):
    return with_decoding(fixture_model_dir, tmp_path / "tuned", {**TUNED, "directions": {"en-ko": TUNED_EN_KO}})


def test_loops_are_counted_per_hypothesis():
    assert loops_in(["야구, 야구, 야구, 야구, 야구의 중심지", "I am a student.", "the the the"]) == 1


def test_best_prefers_the_objective_then_fewer_loops_then_the_earlier_setting():
    trials = [Trial(Setting(1.0, 0), 10.0, 3, []), Trial(Setting(0.6, 0), 10.0, 1, []), Trial(Setting(0.8, 0), 10.0, 1, [])]
    assert best(trials).setting == Setting(0.6, 0)
    assert best([*trials, Trial(Setting(1.4, 0), 10.5, 9, [])]).setting == Setting(1.4, 0)


def test_a_tolerance_trades_a_little_of_the_objective_for_fewer_loops():
    trials = [Trial(Setting(1.0, 0), 20.49, 28, []), Trial(Setting(1.0, 3), 20.30, 0, []), Trial(Setting(1.0, 4), 20.46, 4, [])]
    assert best(trials, tolerance=0.1).setting == Setting(1.0, 4)  # 20.30 is beyond the tolerance
    assert best(trials, tolerance=0.0).setting == Setting(1.0, 0)


def test_the_length_penalty_is_chosen_by_the_objective_and_the_ngram_ban_by_loops_too(monkeypatch):
    """Release v5's grid: α 1.2 wins by 0.07 with one loop more, which the n-gram ban at that α then removes."""
    grid = {Setting(1.0, 0): (20.74, 24), Setting(1.2, 0): (20.81, 25), Setting(1.2, 4): (20.78, 2), Setting(1.0, 4): (20.77, 2)}
    monkeypatch.setattr(tune_decoding, "run_trial", lambda *args: Trial(args[3], *grid[args[3]], []))
    chosen, baseline, trials = tune_decoding.tune(None, [], [], [1.2], [4], 4, None, tolerance=0.1, report=lambda _: None)
    assert [t.setting for t in trials] == [Setting(1.0, 0), Setting(1.2, 0), Setting(1.2, 4)]
    assert chosen.setting == Setting(1.2, 4) and baseline.setting == Setting(1.0, 0)


def test_a_reranking_weight_is_chosen_only_where_it_gains_enough(monkeypatch):
    """Reranking costs a teacher-forced pass per candidate, so λ stays 0 unless the best λ beats it by the margin."""
    grid = {0.0: 20.0, 0.1: 20.05, 0.3: 20.3, 0.5: 20.2}
    monkeypatch.setattr(tune_decoding, "run_trial", lambda *args: Trial(args[3], grid[args[3].reconstruction_weight], 0, []))

    def chosen(min_gain):
        return tune_decoding.tune(None, [], [], [], [], 4, None, report=lambda _: None, reconstruction_weights=[0.1, 0.3, 0.5],
                                  min_rerank_gain=min_gain)[0].setting
    assert chosen(0.1) == Setting(1.0, 0, 0.3)
    assert chosen(0.5) == Setting(1.0, 0, 0.0)


def trial_inventing(setting: Setting, objective: float, invented: int) -> Trial:
    return Trial(setting, objective, 0, [{"numbers": {"in_sources": 50, "missing": 5, "invented": invented}}])


def test_the_number_penalty_that_invents_fewest_numbers_is_kept_within_the_tolerance():
    chosen = trial_inventing(Setting(1.0, 4, 0.3), 19.54, 70)
    guarded = [trial_inventing(Setting(1.0, 4, 0.3, p), objective, invented)
               for p, objective, invented in [(1.0, 19.56, 50), (2.0, 19.50, 40), (3.0, 19.40, 36)]]
    assert fewest_invented_numbers(chosen, guarded).setting.invented_number_penalty == 2.0  # 3.0 costs 0.14 > 0.05
    assert fewest_invented_numbers(chosen, guarded, tolerance=0.2).setting.invented_number_penalty == 3.0
    assert fewest_invented_numbers(chosen, guarded, tolerance=0.0).setting.invented_number_penalty == 1.0
    assert fewest_invented_numbers(chosen, []).setting == chosen.setting
    level = trial_inventing(Setting(1.0, 4, 0.3, 1.0), 19.54, 70)  # inventing as many: no reason to change
    assert fewest_invented_numbers(chosen, [level]).setting == chosen.setting


def test_the_number_penalty_is_tried_last_at_the_chosen_setting(monkeypatch):
    invented = {0.0: 70, 1.0: 45, 2.0: 30}
    monkeypatch.setattr(tune_decoding, "run_trial", lambda *args: trial_inventing(
        args[3], 20.0 - 0.02 * args[3].invented_number_penalty, invented[args[3].invented_number_penalty]))
    chosen, _, trials = tune_decoding.tune(None, [], [], [], [], 4, None, report=lambda _: None,
                                           invented_number_penalties=[1.0, 2.0])
    assert [t.setting.invented_number_penalty for t in trials] == [0.0, 1.0, 2.0]
    assert chosen.setting == Setting(1.0, 0, 0.0, 2.0)


def test_set_weights_weigh_each_sets_primary_metric_in_the_mean():
    results = [{"set": "flores-dev", "primary_metric": "bleu", "bleu": 8.0},
               {"set": "python-docs-dev", "primary_metric": "bleu", "bleu": 20.0},
               {"set": "news-dev", "primary_metric": "chrf", "chrf": 30.0, "bleu": 5.0}]
    assert weighted_objective(results, {}) == pytest.approx(58 / 3)
    assert weighted_objective(results, {"flores-dev": 2, "python-docs-dev": 0.5}) == pytest.approx((16 + 10 + 30) / 3.5)
    assert parse_set_weights("flores-dev=2,python-docs-dev=0.5") == {"flores-dev": 2.0, "python-docs-dev": 0.5}


def test_set_weights_reach_the_objective_that_chooses_the_ban(monkeypatch):
    """Session 28's grid into English: a longer ban wins the plain mean through python-docs-dev and loses flores-dev."""
    bleu = {0: {"flores-dev": 7.4, "python-docs-dev": 30.0}, 6: {"flores-dev": 7.2, "python-docs-dev": 30.6}}
    monkeypatch.setattr(tune_decoding, "run_trial", lambda translator, sets, directions, setting, beam, limit, weights: Trial(
        setting, weighted_objective([{"set": name, "primary_metric": "bleu", "bleu": score}
                                     for name, score in bleu[setting.no_repeat_ngram_size].items()], weights), 0, []))

    def chosen(weights):
        return tune_decoding.tune(None, [], [], [], [6], 4, None, tolerance=0.0, set_weights=weights,
                                  report=lambda _: None)[0].setting
    assert chosen({}) == Setting(1.0, 6)
    assert chosen({"python-docs-dev": 0.25}) == Setting(1.0, 0)


def test_a_model_without_tuned_defaults_decodes_with_the_library_defaults(fixture_translator):
    assert fixture_translator.default_options("ko", "en") == SearchOptions()


def test_tuned_defaults_come_from_metadata_per_direction_and_yield_to_explicit_options(tuned_model_dir):
    translator = Translator.load(tuned_model_dir, device="cpu")
    assert translator.default_options("ko", "en") == SearchOptions(**TUNED)
    assert translator.default_options("en", "ko") == SearchOptions(**{**TUNED, **TUNED_EN_KO})
    assert translator.default_options("en", "ko", length_penalty=1.0, beam_size=2) == SearchOptions(
        beam_size=2, length_penalty=1.0, no_repeat_ngram_size=3)


def test_a_direction_without_an_entry_keeps_the_library_defaults(fixture_model_dir, tmp_path):
    model_dir = with_decoding(fixture_model_dir, tmp_path / "en-ko-only", {"directions": {"en-ko": TUNED_EN_KO}})
    translator = Translator.load(model_dir, device="cpu")
    assert translator.default_options("ko", "en") == SearchOptions()
    assert translator.default_options("en", "ko") == SearchOptions(**TUNED_EN_KO)


def test_default_options_refuse_an_unserved_pair(fixture_translator):
    with pytest.raises(UnsupportedLanguagePair):
        fixture_translator.default_options("ko", "ja")


def test_translate_decodes_each_direction_with_its_own_defaults(tuned_model_dir, monkeypatch):
    translator = Translator.load(tuned_model_dir, device="cpu")
    used = []
    original = translator.translate_sentences
    monkeypatch.setattr(translator, "translate_sentences",
                        lambda sentences, target_lang, options, strategy=None: used.append(options) or original(sentences, target_lang, options))
    translator.translate(["나는 학생입니다"], "ko", "en")
    translator.translate(["I am a student."], "en", "ko")
    assert [o.length_penalty for o in used] == [0.6, 2.0]


def test_the_server_fills_unset_options_with_the_models_defaults_for_the_pair(tuned_model_dir):
    validator = RequestValidator(Translator.load(tuned_model_dir, device="cpu"), Limits())
    assert validator.search_options(translator_pb2.DecodingOptions(), "ko", "en") == SearchOptions(**TUNED)
    assert validator.search_options(translator_pb2.DecodingOptions(), "en", "ko").length_penalty == 2.0
    given = validator.search_options(translator_pb2.DecodingOptions(no_repeat_ngram_size=0, beam_size=2), "en", "ko")
    assert given == SearchOptions(beam_size=2, length_penalty=2.0, no_repeat_ngram_size=0)


def test_each_direction_is_tuned_on_its_own_objective(monkeypatch):
    """The same grid read per direction: α 2.0 wins into Korean and loses into English, so each keeps its own."""
    objective = {("en", "ko"): {1.0: 25.9, 2.0: 26.2}, ("ko", "en"): {1.0: 19.0, 2.0: 18.4}}
    monkeypatch.setattr(tune_decoding, "run_trial", lambda translator, sets, directions, setting, *rest: Trial(
        setting, objective[directions[0]][setting.length_penalty] - 0.01 * setting.no_repeat_ngram_size, 0, []))
    choices = tune_decoding.tune_directions(None, [], [("ko", "en"), ("en", "ko")], [2.0], [4], 4, None, report=lambda _: None)
    assert {pair: c.chosen.setting for pair, c in choices.items()} == {"ko-en": Setting(1.0, 0), "en-ko": Setting(2.0, 0)}
    assert all(c.baseline.setting == Setting(1.0, 0) for c in choices.values())


def test_tuning_writes_each_directions_choice_and_evaluate_uses_it(fixture_model_dir, tiny_recipe, tmp_path, capsys):
    model_dir = shutil.copytree(fixture_model_dir, tmp_path / "model")
    chosen = tune_decoding.main(["--config", str(tiny_recipe), "--model", str(model_dir), "--length-penalties", "0.6",
                                 "--no-repeat-ngram-sizes", "2", "--reconstruction-weights", "0.5", "--min-rerank-gain", "-100",
                                 "--invented-number-penalties", "3", "--set-weights", "tiny-dev=2", "--write"])
    assert set(chosen) == {"ko-en", "en-ko"}
    assert all(setting.reconstruction_weight == 0.5 for setting in chosen.values())  # any gain would do
    report = json.loads((model_dir / "decoding.json").read_text(encoding="utf-8"))
    for pair, tuning in report["directions"].items():
        tried = [(t["length_penalty"], t["no_repeat_ngram_size"], t["reconstruction_weight"], t["invented_number_penalty"])
                 for t in tuning["trials"]]
        assert tried[:2] == [(1.0, 0, 0, 0), (0.6, 0, 0, 0)] and tried[-3][1:] == (2, 0, 0)  # the library default first, then the ban
        assert tried[-2][2:] == (0.5, 0)  # the reranking weight at the chosen α and ban
        assert tried[-1][2:] == (0.5, 3)  # the number penalty last, at the chosen weight
        assert all(t["invented_numbers"] == sum(r["numbers"]["invented"] for r in t["results"]) for t in tuning["trials"])
        assert {(r["set"], r["direction"]) for t in tuning["trials"] for r in t["results"]} == {("tiny-dev", pair)}  # dev sets only
    decoding = json.loads((model_dir / "metadata.json").read_text(encoding="utf-8"))["decoding"]
    assert decoding["chosen_on"]["set_weights"] == report["set_weights"] == {"tiny-dev": 2.0}
    for pair, setting in chosen.items():
        written = decoding["directions"][pair]
        assert (written["length_penalty"], written["no_repeat_ngram_size"], written["reconstruction_weight"]) == (
            setting.length_penalty, setting.no_repeat_ngram_size, 0.5)
    printed = capsys.readouterr().out
    assert "ko-en chosen:" in printed and "en-ko chosen:" in printed

    evaluation = evaluate.main(["--config", str(tiny_recipe), "--model", str(model_dir), "--sets", "tiny-dev"])
    for pair, setting in chosen.items():
        used = evaluation["decoding"]["directions"][pair]
        assert (used["length_penalty"], used["no_repeat_ngram_size"], used["reconstruction_weight"]) == (
            setting.length_penalty, setting.no_repeat_ngram_size, 0.5)


def test_the_reranking_weights_share_one_search_and_one_channel_pass_per_set(fixture_model_dir, tiny_recipe, monkeypatch):
    """The λ stage reranks the same beam with the same back-translation scores at every weight: searched and scored
    once, with the results a fresh search gives at each weight."""
    calls = {"search_ids": 0, "reconstruction_scores": 0}
    for name in calls:
        def counted(self, *args, _original=getattr(Translator, name), _name=name):
            calls[_name] += 1
            return _original(self, *args)
        monkeypatch.setattr(Translator, name, counted)
    sets = evaluation_sets(load_recipe(tiny_recipe), ["tiny-dev"])

    def trials(translator, weights=(0.1, 0.5, 1.0)):
        return [run_trial(translator, sets, [("ko", "en")], Setting(1.0, 0, w), 4, None, EVEN) for w in weights]

    reused = trials(ReusingTranslator.load(fixture_model_dir, "cpu"))
    assert calls["reconstruction_scores"] == 1 and calls["search_ids"] >= 1
    searches_of_one_weight = calls["search_ids"]
    fresh = trials(Translator.load(fixture_model_dir, "cpu"))
    assert calls["search_ids"] == 4 * searches_of_one_weight and calls["reconstruction_scores"] == 4
    untimed = lambda trial: [{k: v for k, v in r.items() if k not in ("seconds", "sentences_per_second")} for r in trial.results]
    assert [untimed(t) for t in reused] == [untimed(t) for t in fresh]


def test_tuning_refuses_test_sets(fixture_model_dir, tiny_recipe):
    with pytest.raises(SystemExit):
        tune_decoding.main(["--config", str(tiny_recipe), "--model", str(fixture_model_dir), "--sets", "tiny-test"])


@pytest.mark.parametrize("weights", ["tiny-test=2", "tiny-dev=0", "tiny-dev", "tiny-dev=-1"])
def test_tuning_refuses_weights_it_cannot_use(fixture_model_dir, tiny_recipe, weights, capsys):
    with pytest.raises(SystemExit):
        tune_decoding.main(["--config", str(tiny_recipe), "--model", str(fixture_model_dir), "--set-weights", weights])
    assert "--set-weights" in capsys.readouterr().err
