"""Before/after: our beam-4 decoding speed under two source trees, e.g. a checkout of an older commit and this one.

    git archive 428e82c nmt | tar -x -C /tmp/before        # the library as it was
    python -m bench.compare --baseline /tmp/before --model models/default --dev runs/release/data/dev.jsonl

Both trees decode the same length-sorted batches through ``Translator.translate_sentences`` (an API both
have), each in its own process, alternating run by run so that other load on the machine hits both alike.
The outputs are compared too: a speed-up must not change translations beyond floating-point ties.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.common import load_dev_set, markdown_table, median

REPO = Path(__file__).resolve().parent.parent


def worker(model_dir: str, sentences: list[str], target_lang: str, batch_size: int, threads: int) -> dict:
    """Runs with ``nmt`` imported from the tree under test: one timed pass after a warm-up batch."""
    import torch

    from nmt.search import SearchOptions
    from nmt.translator import Translator

    torch.set_num_threads(threads)
    translator = Translator.load(model_dir, "cpu", max_batch_tokens=10**9)  # one call = one batch
    options = SearchOptions(beam_size=4)
    order = sorted(range(len(sentences)), key=lambda i: len(translator.tokenizer.encode(sentences[i])))
    batches = [[sentences[i] for i in order[start : start + batch_size]] for start in range(0, len(order), batch_size)]
    translator.translate_sentences(batches[len(batches) // 2], target_lang, options)
    started = time.perf_counter()
    outputs = [nbest[0].tokens for batch in batches for nbest in translator.translate_sentences(batch, target_lang, options)]
    return {"seconds": time.perf_counter() - started, "outputs": outputs, "nmt": str(Path(sys.modules["nmt"].__file__).parent)}


def run_worker(tree: Path, job: dict) -> dict:
    """``python -m`` puts the working directory first on sys.path: run in ``tree`` to import its ``nmt``."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "bench.compare", "--worker", json.dumps(job)]
    result = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--baseline", type=Path, help="a source tree holding the nmt/ package to compare against")
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--dev", type=Path, default=Path("runs/release/data/dev.jsonl"))
    parser.add_argument("--corpus", default="jhe-dev")
    parser.add_argument("--source-lang", default="ko")
    parser.add_argument("--target-lang", default="en")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(**json.loads(args.worker))))
        return 0
    if args.baseline is None:
        parser.error("--baseline is required")
    dev = load_dev_set(args.dev, args.corpus, args.source_lang, args.target_lang, args.sentences)
    trees = {"baseline": args.baseline.resolve(), "current": REPO}
    rows = []
    for batch_size in args.batch_sizes:
        job = {"model_dir": str(args.model.resolve()), "sentences": dev.sources, "target_lang": dev.target_lang,
               "batch_size": batch_size, "threads": args.threads}
        runs: dict[str, list[dict]] = {name: [] for name in trees}
        for _ in range(args.runs):
            for name, tree in trees.items():
                runs[name].append(run_worker(tree, job))
        seconds = {name: median([r["seconds"] for r in results]) for name, results in runs.items()}
        differing = sum(a != b for a, b in zip(runs["baseline"][0]["outputs"], runs["current"][0]["outputs"]))
        rows.append([batch_size, len(dev.sources) / seconds["baseline"], len(dev.sources) / seconds["current"],
                     seconds["baseline"] / seconds["current"], differing])
        print(f"batch {batch_size}: baseline nmt from {runs['baseline'][0]['nmt']}, current from {runs['current'][0]['nmt']}", file=sys.stderr)
    print(markdown_table(["batch", "baseline sentences/s", "current sentences/s", "speed-up", "outputs that differ"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
