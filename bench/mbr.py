"""Minimum Bayes-risk reranking of the beam's n-best against its top choice (MAP) and its ceiling, on the dev sets.

    python -m bench.mbr --model models/default --dev runs/release/data/dev.jsonl --sentences 300   (make bench-mbr)

MBR picks, among the n-best, the candidate with the highest expected utility against the list, each candidate
weighted by the model's probability of it renormalised over the list (Kumar & Byrne, 2004; Freitag et al., 2022,
"High quality rather than high model probability"). It tends to raise the metric used as utility on long, varied
sentences, and to pick a wordier consensus on short ones. The benchmark says which holds for a model: for every
corpus and direction of the dev file, each beam size decodes once with n-best = beam; the MAP choice and the MBR
choice under each utility (sentence chrF, sentence BLEU) are scored with corpus BLEU and chrF as ``make eval`` scores
them, and each choice gets the mean primary metric over the set-directions (BLEU into English, chrF into Korean).
The oracle choice reads the reference: each sentence's candidate of highest sentence-level primary metric, the
ceiling that no reranking of this n-best (MBR, back-translation, a language model) can pass.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch
from sacrebleu.metrics import BLEU, CHRF

from bench.common import RESULTS_DIR, json_config, load_dev_set, machine, markdown_table, report, write_results
from nmt.translator import Translator
from training.evaluate import bleu_tokenize, primary_metric, score

Utility = Callable[[str, str], float]  # (hypothesis, pseudo-reference) → similarity, 100 for identical texts


def utilities(target_lang: str) -> dict[str, Utility]:
    """Sentence-level chrF and BLEU, tokenised for ``target_lang`` as the corpus scores are."""
    chrf, bleu = CHRF(), BLEU(tokenize=bleu_tokenize(target_lang), effective_order=True)
    return {
        "chrf": lambda hypothesis, reference: chrf.sentence_score(hypothesis, [reference]).score,
        "bleu": lambda hypothesis, reference: bleu.sentence_score(hypothesis, [reference]).score,
    }


def mbr_choice(candidates: Sequence[str], scores: Sequence[float], utility: Utility) -> int:
    """Index of the candidate of highest expected ``utility`` against all candidates (itself included), under the
    softmax of their model ``scores``: argmaxᵢ Σⱼ p(cⱼ) · u(cᵢ, cⱼ)."""
    posterior = torch.tensor(scores, dtype=torch.float64).softmax(0).tolist()
    expected = [sum(p * utility(candidate, other) for p, other in zip(posterior, candidates)) for candidate in candidates]
    return max(range(len(candidates)), key=expected.__getitem__)


def oracle_choice(candidates: Sequence[str], reference: str, utility: Utility) -> int:
    """Index of the candidate closest to the reference: what a perfect reranker would pick (the earliest on ties)."""
    return max(range(len(candidates)), key=lambda i: utility(candidates[i], reference))


def directions_of(path: Path) -> list[tuple[str, str, str]]:
    """Every (corpus, source_lang, target_lang) of a prepared dev file, in file order."""
    seen: dict[tuple[str, str, str], None] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        seen.setdefault((row["corpus"], row["source_lang"], row["target_lang"]))
    return list(seen)


def compare_choices(translator: Translator, dev_path: Path, sentences: int, beam_sizes: Sequence[int]) -> Iterator[dict]:
    """One row per set-direction and beam size, as each is done: the MAP and MBR choices' corpus scores and the
    decoding time."""
    for corpus, source_lang, target_lang in directions_of(dev_path):
        dev = load_dev_set(dev_path, corpus, source_lang, target_lang, sentences)
        for beam_size in beam_sizes:
            # the beam's own n-best and scores: the model's reranking by back-translation would reorder both
            options = translator.default_options(source_lang, target_lang, beam_size=beam_size, nbest=beam_size,
                                                 reconstruction_weight=0.0)
            started = time.perf_counter()
            nbest = [([c.text for c in t.candidates], [c.score for c in t.candidates])
                     for t in translator.translate(dev.sources, source_lang, target_lang, options)]
            decoded = time.perf_counter()
            choices = {"map": [texts[0] for texts, _ in nbest]}
            for name, utility in utilities(target_lang).items():
                choices[f"mbr-{name}"] = [texts[mbr_choice(texts, scores, utility)] for texts, scores in nbest]
            primary = utilities(target_lang)[primary_metric(target_lang)]
            choices["oracle"] = [texts[oracle_choice(texts, reference, primary)] for (texts, _), reference in zip(nbest, dev.references)]
            yield {
                "set": corpus, "direction": f"{source_lang}-{target_lang}", "beam_size": beam_size,
                "sentences": len(dev.sources), "primary_metric": primary_metric(target_lang),
                "decode_seconds": decoded - started, "rerank_seconds": time.perf_counter() - decoded,
                "choices": {name: score(texts, dev.references, target_lang) for name, texts in choices.items()},
            }


def mean_primary(rows: Sequence[dict], beam_size: int, choice: str) -> float:
    chosen = [r for r in rows if r["beam_size"] == beam_size]
    return sum(r["choices"][choice][r["primary_metric"]] for r in chosen) / len(chosen)


def table(rows: Sequence[dict], beam_sizes: Sequence[int]) -> str:
    choices = list(rows[0]["choices"])
    headers = ["set", "direction", "metric", *(f"beam {b} {c}" for b in beam_sizes for c in choices)]
    by_key: dict[tuple[str, str], dict[int, dict]] = {}
    for r in rows:
        by_key.setdefault((r["set"], r["direction"]), {})[r["beam_size"]] = r
    lines = [[s, d, next(iter(per_beam.values()))["primary_metric"],
              *(per_beam[b]["choices"][c][per_beam[b]["primary_metric"]] for b in beam_sizes for c in choices)]
             for (s, d), per_beam in by_key.items()]
    lines.append(["mean", "", "primary", *(mean_primary(rows, b, c) for b in beam_sizes for c in choices)])
    return markdown_table(headers, lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--dev", type=Path, required=True, help="prepared dev set (RUN_DIR/data/dev.jsonl)")
    parser.add_argument("--sentences", type=int, default=300, help="first N pairs of every set-direction")
    parser.add_argument("--beam-sizes", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "mbr.json")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    translator = Translator.load(args.model, device="cpu")
    results = {"config": json_config(args), "machine": machine(), "rows": []}
    for row in compare_choices(translator, args.dev, args.sentences, args.beam_sizes):
        results["rows"].append(row)
        write_results(args.out, results)  # a long run stopped early keeps what it measured
    return report(args.out, results, table(results["rows"], args.beam_sizes))


if __name__ == "__main__":
    raise SystemExit(main())
