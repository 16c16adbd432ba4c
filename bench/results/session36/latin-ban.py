"""Session 36: how much of release v14's Korean output is Latin script against the references, and what banning
every Latin-letter piece from translations into Korean does to chrF (the first N lines of five dev sets, the
release's decoding otherwise). Run from the repository root: .venv/bin/python bench/results/session36/latin-ban.py 200"""

import dataclasses
import re
import sys
import time

import torch

from nmt.translator import Translator
from training.evaluate import evaluation_sets, read_parallel, score
from training.recipe import load_recipe

LATIN = re.compile(r"[A-Za-z]")


def latin_share(lines: list[str]) -> str:
    letters = sum(len(LATIN.findall(line)) for line in lines)
    characters = sum(len(line.replace(" ", "")) for line in lines)
    words = sum(1 for line in lines if re.search(r"[A-Za-z]{2,}", line))
    return f"Latin {letters / characters:.1%} of characters, a Latin word in {words} of {len(lines)} lines"


torch.set_num_threads(2)
limit = int(sys.argv[1])
translator = Translator.load("models/default", device="cpu")
sp = translator.tokenizer.sp
latin_pieces = tuple(i for i in range(sp.get_piece_size())
                     if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i)) and LATIN.search(sp.id_to_piece(i)))
print(f"{len(latin_pieces)} of {sp.get_piece_size()} pieces hold a Latin letter")
sets = {s.name: s for s in evaluation_sets(load_recipe("configs/release-v4.yaml"))}
for name in ["flores-dev", "news-dev", "python-docs-dev", "jhe-dev", "manythings-dev"]:
    sources, references = read_parallel(sets[name].prefix, "en", "ko", limit)
    print(f"{name} references: {latin_share(references)}")
    for banned in (False, True):
        options = translator.default_options("en", "ko")
        options = dataclasses.replace(options, banned_ids=latin_pieces) if banned else options
        started = time.time()
        hypotheses = [t.text for t in translator.translate(sources, "en", "ko", options)]
        scores = score(hypotheses, references, "ko")
        print(f"{name} {'Latin banned' if banned else 'as released'}: chrF {scores['chrf']:.2f}, BLEU {scores['bleu']:.2f}, "
              f"{latin_share(hypotheses)} ({time.time() - started:.0f} s)", flush=True)
