"""Choose a model's decoding defaults on the dev sets, per direction: length penalty, no-repeat n-gram size, the
weight of reranking by back-translation, then the penalty on invented numbers.

    python -m training.tune_decoding --config configs/release.yaml --model models/default [--limit 200] [--write]

Both settings trade one kind of sentence for another: a larger length penalty α (score = log P / length^α) helps
long sentences and costs short ones, and banning repeated n-grams stops decoding loops ("야구, 야구, 야구") but
also forbids honest repeats. So they are chosen by measurement, per model, on the recipe's dev sets only (never
its test sets): first α with repeats allowed, then the n-gram size at the chosen α. Each direction is tuned on
its own, since the directions pull apart: chrF into Korean rewards recall and gains from a longer-favouring α that
costs BLEU into English (release v10: α 2.0 against 1.0 gave en→ko +0.3 chrF and ko→en −0.5 BLEU on the dev
sets). A direction's objective is the mean of its primary metric (BLEU into English, chrF into Korean) over every
dev set, or a weighted mean with ``--set-weights``: the plain mean follows whichever set moves most (a longer
n-gram ban gains python-docs-dev most, whose code-like text repeats honestly, and costs the general sets the
release targets; session 28). The report also counts looping hypotheses (a word n-gram four times in a row), the
failure the n-gram ban is for. Last, at the chosen α and n-gram size, the reconstruction weight λ of
:mod:`nmt.rerank`: reranking the beam by log P(source | candidate) costs a teacher-forced pass over every candidate,
so a λ above 0 is kept only where it gains at least ``--min-rerank-gain`` on the objective. The λ trials rerank one
beam with one set of channel scores per dev set (:class:`ReusingTranslator`), so a longer λ grid costs almost nothing.
Then the penalty on tokens that write a number the source lacks (:mod:`nmt.numbers`): BLEU and chrF barely see a
wrong number and a reader sees nothing else, so of ``--invented-number-penalties`` the one that invents fewest
numbers on the dev sets is kept among those that cost at most ``--number-tolerance`` of the objective.

``--write`` stores each direction's choice in the model's ``metadata.json`` under ``decoding`` → ``directions``,
where :class:`~nmt.translator.Translator` takes its defaults from; the full grid goes to ``<model>/decoding.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from nmt.checkpoint import CheckpointError
from nmt.search import Hypothesis, SearchOptions
from nmt.translator import Strategy, Translator
from training.bt_filter import repeats_ngram
from training.evaluate import EvaluationConfig, EvaluationError, evaluate, evaluation_sets, read_lines
from training.recipe import load_recipe

_WORD = re.compile(r"\w+")
LOOP_NGRAM, LOOP_REPEATS = 4, 4  # as the back-translation filter: four repeats in a row is a loop


@dataclass(frozen=True)
class Setting:
    length_penalty: float
    no_repeat_ngram_size: int
    reconstruction_weight: float = 0.0
    invented_number_penalty: float = 0.0


@dataclass
class Trial:
    setting: Setting
    objective: float  # mean primary metric over dev sets and directions
    loops: int  # hypotheses that repeat a word n-gram LOOP_REPEATS times in a row
    results: list[dict]

    @property
    def invented_numbers(self) -> int:
        """Numbers the hypotheses wrote that their sources lack, over every set (training.evaluate's count)."""
        return sum(r["numbers"]["invented"] for r in self.results)


def loops_in(hypotheses: Sequence[str]) -> int:
    return sum(repeats_ngram(_WORD.findall(h.lower()), LOOP_NGRAM, LOOP_REPEATS) for h in hypotheses)


EVEN: Mapping[str, float] = MappingProxyType({})  # every dev set at weight 1


def weighted_objective(results: Sequence[dict], set_weights: Mapping[str, float]) -> float:
    """The mean primary metric over ``results``, each set weighted by ``set_weights`` (1 where not named)."""
    weights = [set_weights.get(r["set"], 1.0) for r in results]
    return sum(w * r[r["primary_metric"]] for w, r in zip(weights, results)) / sum(weights)


def run_trial(translator: Translator, sets, directions, setting: Setting, beam_size: int, limit: int | None,
              set_weights: Mapping[str, float]) -> Trial:
    """Decode every dev set in every direction with ``setting`` and score it."""
    search = {"beam_size": beam_size, **vars(setting)}
    config = EvaluationConfig(search_overrides=search, batch_tokens=translator.max_batch_tokens, limit=limit)
    with tempfile.TemporaryDirectory() as hypotheses_dir:
        results = evaluate(translator, sets, directions, config, Path(hypotheses_dir))
        loops = sum(loops_in(read_lines(Path(r["hypotheses"]))) for r in results)
    for r in results:
        del r["hypotheses"]  # a temporary file
    return Trial(setting, round(weighted_objective(results, set_weights), 3), loops, results)


LOOP_TOLERANCE = 0.1  # mean metric points: far below what 300 dev lines per set can tell apart
MIN_RERANK_GAIN = 0.1  # mean metric points a reranking weight must add to be worth its teacher-forced pass
NUMBER_TOLERANCE = 0.05  # mean metric points the number penalty may cost: the metrics barely see numbers, readers do


def best(trials: Sequence[Trial], tolerance: float = 0.0) -> Trial:
    """Fewest loops among the trials within ``tolerance`` of the highest objective, then the highest objective,
    then the earliest (the grid lists defaults first): a looping output is a visible failure, and a difference in
    the mean below the noise of the dev sets is not a reason to keep it."""
    top = max(t.objective for t in trials)
    contenders = [t for t in trials if t.objective >= top - tolerance]
    return max(contenders, key=lambda t: (-t.loops, t.objective))


def fewest_invented_numbers(chosen: Trial, guarded: Sequence[Trial], tolerance: float = NUMBER_TOLERANCE) -> Trial:
    """Of ``chosen`` and the ``guarded`` trials within ``tolerance`` of its objective, the one that invents fewest
    numbers, then the higher objective, then the earlier."""
    contenders = [chosen, *(t for t in guarded if t.objective >= chosen.objective - tolerance)]
    return min(contenders, key=lambda t: (t.invented_numbers, -t.objective))


BASELINE = Setting(SearchOptions.length_penalty, SearchOptions.no_repeat_ngram_size)


class ReusingTranslator(Translator):
    """A Translator that searches a dev set once for every reconstruction weight λ, and scores its candidates'
    back-translations once: the beam does not depend on λ (any λ above 0 keeps all of it), nor do the channel
    scores, so the trials of the λ stage rerank the same n-best lists and cost one search and one teacher-forced
    pass per set and direction between them, not one of each per λ."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._searched: dict[tuple, list[list[Hypothesis]]] = {}
        self._channel: dict[tuple, list[list[float]]] = {}

    def translate_sentences(self, sentences: Sequence[str], target_lang: str, options: SearchOptions,
                            strategy: Strategy | None = None) -> list[list[Hypothesis]]:
        # what the search itself is given (a λ above 0 only keeps the whole beam, decoding_options), λ aside
        search = dataclasses.replace(self.decoding_options(options), reconstruction_weight=0.0)
        key = (tuple(sentences), target_lang, repr(search), strategy)
        if key not in self._searched:
            self._searched[key] = super().translate_sentences(sentences, target_lang, options, strategy)
        return self._searched[key]

    def reconstruction_scores(self, sentences: Sequence[str], hypotheses: Sequence[list[Hypothesis]],
                              source_lang: str) -> list[list[float]]:
        key = (tuple(sentences), source_lang, tuple(tuple(tuple(h.tokens) for h in nbest) for nbest in hypotheses))
        if key not in self._channel:
            self._channel[key] = super().reconstruction_scores(sentences, hypotheses, source_lang)
        return self._channel[key]


def tune(translator: Translator, sets, directions, length_penalties: Sequence[float], ngram_sizes: Sequence[int],
         beam_size: int, limit: int | None, tolerance: float = LOOP_TOLERANCE, set_weights: Mapping[str, float] = EVEN,
         report=print, reconstruction_weights: Sequence[float] = (), min_rerank_gain: float = MIN_RERANK_GAIN,
         invented_number_penalties: Sequence[float] = (), number_tolerance: float = NUMBER_TOLERANCE,
         ) -> tuple[Trial, Trial, list[Trial]]:
    """(chosen, baseline, all trials): the library defaults first, α over ``length_penalties`` with repeats
    allowed, by the objective alone (the loops there are what the n-gram stage is for, so they must not pick α),
    then the n-gram size at that α by :func:`best` with ``tolerance``, then the reconstruction weight at both,
    the best of ``reconstruction_weights`` where it beats no reranking by ``min_rerank_gain``, then of
    ``invented_number_penalties`` the one :func:`fewest_invented_numbers` keeps. Ties keep the earlier setting, so
    the defaults stay unless beaten."""
    trials: list[Trial] = []

    def trial(setting: Setting) -> Trial:
        done = next((t for t in trials if t.setting == setting), None)
        if done is None:
            started = time.monotonic()
            done = run_trial(translator, sets, directions, setting, beam_size, limit, set_weights)
            trials.append(done)
            report(f"length_penalty {setting.length_penalty:<4} no_repeat_ngram_size {setting.no_repeat_ngram_size} "
                   f"reconstruction_weight {setting.reconstruction_weight:g} invented_number_penalty "
                   f"{setting.invented_number_penalty:g}: objective {done.objective:.3f}, loops {done.loops}, invented numbers "
                   f"{done.invented_numbers} ({time.monotonic() - started:.0f} s)")
        return done

    baseline = trial(BASELINE)
    alpha = best([baseline, *(trial(Setting(a, 0)) for a in length_penalties)]).setting.length_penalty
    chosen = best([trial(Setting(alpha, n)) for n in [0, *ngram_sizes]], tolerance)
    reranked = [trial(dataclasses.replace(chosen.setting, reconstruction_weight=w)) for w in reconstruction_weights]
    if reranked and (top := best(reranked)).objective >= chosen.objective + min_rerank_gain:
        chosen = top
    guarded = [trial(dataclasses.replace(chosen.setting, invented_number_penalty=p)) for p in invented_number_penalties]
    return fewest_invented_numbers(chosen, guarded, number_tolerance), baseline, trials


@dataclass
class Choice:
    """One direction's tuning: the chosen trial, the library defaults' trial, and every trial run."""

    chosen: Trial
    baseline: Trial
    trials: list[Trial]


def tune_directions(translator: Translator, sets, directions: Sequence[tuple[str, str]], length_penalties: Sequence[float],
                    ngram_sizes: Sequence[int], beam_size: int, limit: int | None, tolerance: float = LOOP_TOLERANCE,
                    set_weights: Mapping[str, float] = EVEN, report=print, reconstruction_weights: Sequence[float] = (),
                    min_rerank_gain: float = MIN_RERANK_GAIN, invented_number_penalties: Sequence[float] = (),
                    number_tolerance: float = NUMBER_TOLERANCE) -> dict[str, Choice]:
    """:func:`tune` for each direction on its own dev sets and objective, ``"ko-en"`` → its :class:`Choice`."""
    choices = {}
    for source_lang, target_lang in directions:
        pair = f"{source_lang}-{target_lang}"
        choices[pair] = Choice(*tune(translator, sets, [(source_lang, target_lang)], length_penalties, ngram_sizes,
                                     beam_size, limit, tolerance, set_weights,
                                     lambda line, pair=pair: report(f"{pair}: {line}"), reconstruction_weights, min_rerank_gain,
                                     invented_number_penalties, number_tolerance))
    return choices


def write_defaults(model_dir: Path, choices: dict[str, Choice], sets: Sequence[str], limit: int | None,
                   set_weights: Mapping[str, float]) -> None:
    """Record each direction's chosen defaults in ``metadata.json`` (the Translator reads them from there)."""
    path = model_dir / "metadata.json"
    metadata = json.loads(path.read_text(encoding="utf-8"))
    metadata["decoding"] = {
        "directions": {pair: {**vars(c.chosen.setting), "objective": c.chosen.objective, "loops": c.chosen.loops,
                              "invented_numbers": c.chosen.invented_numbers,
                              "before": {"objective": c.baseline.objective, "loops": c.baseline.loops,
                                         "invented_numbers": c.baseline.invented_numbers}}
                       for pair, c in choices.items()},
        "chosen_on": {"sets": list(sets), "limit": limit, "set_weights": dict(set_weights)},
    }
    path.write_text(json.dumps(metadata, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def parse_floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


def parse_ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def parse_set_weights(text: str) -> dict[str, float]:
    """``flores-dev=2,python-docs-dev=0.5`` → {"flores-dev": 2.0, "python-docs-dev": 0.5}."""
    weights = {}
    for item in text.split(","):
        name, equals, value = item.partition("=")
        if not equals or not name:
            raise argparse.ArgumentTypeError(f"expected SET=WEIGHT, got {item!r}")
        weights[name] = float(value)
        if weights[name] < 0:
            raise argparse.ArgumentTypeError(f"a set weight must be >= 0, got {item!r}")
    return weights


def main(argv: Sequence[str] | None = None) -> dict[str, Setting]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, required=True, help="recipe whose dev sets choose the settings")
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--sets", type=lambda text: text.split(","), help="dev sets to use (default: all of the recipe's)")
    parser.add_argument("--limit", type=int, help="first N lines of every dev set")
    parser.add_argument("--beam-size", type=int, default=SearchOptions.beam_size)
    parser.add_argument("--length-penalties", type=parse_floats, default=[0.6, 0.8, 1.2, 1.5, 2.0],
                        help="α values to try besides the library default (default: 0.6,0.8,1.2,1.5,2.0)")
    parser.add_argument("--no-repeat-ngram-sizes", type=parse_ints, default=[3, 4],
                        help="n-gram sizes to try at the best α, besides 0 (repeats allowed) (default: 3,4)")
    parser.add_argument("--reconstruction-weights", type=parse_floats, default=[0.1, 0.3, 0.5, 1.0],
                        help="reranking weights λ to try at the chosen α and n-gram size (default: 0.1,0.3,0.5,1.0)")
    parser.add_argument("--min-rerank-gain", type=float, default=MIN_RERANK_GAIN,
                        help="the objective a λ above 0 must add to be chosen (default: %(default)s)")
    parser.add_argument("--invented-number-penalties", type=parse_floats, default=[1.0, 2.0, 3.0],
                        help="penalties on numbers the source lacks to try last (default: 1,2,3)")
    parser.add_argument("--number-tolerance", type=float, default=NUMBER_TOLERANCE,
                        help="the objective the number penalty may cost (default: %(default)s)")
    parser.add_argument("--loop-tolerance", type=float, default=LOOP_TOLERANCE,
                        help="give up this much of the objective for fewer looping outputs (default: %(default)s)")
    parser.add_argument("--set-weights", type=parse_set_weights, default={},
                        help="weights of dev sets in each direction's mean, e.g. flores-dev=2,python-docs-dev=0.5 (others 1)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--write", action="store_true", help="store the choice in the model's metadata.json")
    args = parser.parse_args(argv)

    recipe = load_recipe(args.config)
    dev_names = args.sets or [spec.name for spec in recipe.dev]
    if unknown := set(dev_names) - {spec.name for spec in recipe.dev}:
        parser.error(f"not dev sets of {args.config}: {', '.join(sorted(unknown))} (models are chosen on dev sets only)")
    if unweighed := set(args.set_weights) - set(dev_names):
        parser.error(f"--set-weights names sets not tuned on: {', '.join(sorted(unweighed))}")
    if not any(args.set_weights.get(name, 1.0) for name in dev_names):
        parser.error("--set-weights leaves every dev set at weight 0")
    sets = evaluation_sets(recipe, dev_names)
    translator = ReusingTranslator.load(args.model, args.device)
    choices = tune_directions(translator, sets, recipe.directions, args.length_penalties, args.no_repeat_ngram_sizes,
                              args.beam_size, args.limit, args.loop_tolerance, args.set_weights,
                              reconstruction_weights=args.reconstruction_weights, min_rerank_gain=args.min_rerank_gain,
                              invented_number_penalties=args.invented_number_penalties, number_tolerance=args.number_tolerance)
    report = {"sets": dev_names, "limit": args.limit, "set_weights": args.set_weights, "beam_size": args.beam_size,
              "loop_tolerance": args.loop_tolerance, "number_tolerance": args.number_tolerance,
              "directions": {pair: {"chosen": vars(c.chosen.setting),
                                    "trials": [{**vars(t.setting), "objective": t.objective, "loops": t.loops,
                                                "invented_numbers": t.invented_numbers, "results": t.results}
                                               for t in c.trials]}
                             for pair, c in choices.items()}}
    (args.model / "decoding.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    for pair, c in choices.items():
        setting = c.chosen.setting
        print(f"{pair} chosen: length_penalty {setting.length_penalty}, no_repeat_ngram_size {setting.no_repeat_ngram_size}, "
              f"reconstruction_weight {setting.reconstruction_weight:g}, invented_number_penalty "
              f"{setting.invented_number_penalty:g}: objective {c.baseline.objective:.3f} -> {c.chosen.objective:.3f}, "
              f"loops {c.baseline.loops} -> {c.chosen.loops}, invented numbers {c.baseline.invented_numbers} -> "
              f"{c.chosen.invented_numbers}")
    if args.write:
        write_defaults(args.model, choices, dev_names, args.limit, args.set_weights)
        print(f"wrote the defaults into {args.model / 'metadata.json'}")
    return {pair: c.chosen.setting for pair, c in choices.items()}


if __name__ == "__main__":
    try:
        main()
    except (EvaluationError, CheckpointError) as error:
        raise SystemExit(f"error: {error}") from error
