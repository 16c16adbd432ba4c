#!/usr/bin/env bash
# The invented-number penalty on release v14 (models/default): the first 300 lines of every dev set, both
# directions, at penalties 0 (the release's decoding), 1, 2 and 3; then the paired comparison against 0. First run:
# the guard as committed in 351a3f4 (out: numbers-dev300); second, with what the source's numbers mean (Korean
# units multiplied out, English month and number words; commit c71423b):
#   mkdir -p bench/results/session36/numbers-dev300-meant && cp -r bench/results/session36/numbers-dev300/p0* $_/
#   OUT=bench/results/session36/numbers-dev300-meant bash bench/results/session36/numbers-dev300.sh
# (penalty 0 does not consult the guard, so its report is the same). --write stores the choice in models/default.
set -eu
cd "$(dirname "$0")/../../.."
out=${OUT:-bench/results/session36/numbers-dev300}
mkdir -p "$out"
for penalty in 0 1 2 3; do
  [ -s "$out/p$penalty.json" ] || .venv/bin/python -m training.evaluate --config configs/release-v4.yaml --model models/default \
    --sets manythings-dev,jhe-dev,flores-dev,python-docs-dev,news-dev --limit 300 \
    --invented-number-penalty "$penalty" --out "$out/p$penalty.json"
done
.venv/bin/python -m training.compare "$out/p0.json" "$out/p1.json" "$out/p2.json" "$out/p3.json" > "$out/compare.txt"
# The tuner's last stage (training.tune_decoding.fewest_invented_numbers) over these runs, per direction: the
# penalty that invents fewest numbers within NUMBER_TOLERANCE of the release's objective; --write stores it in
# models/default/metadata.json as `make tune-decoding` would have.
.venv/bin/python - "$out" "${1:-}" <<'PY'
import json, sys
from pathlib import Path
from training.tune_decoding import Setting, Trial, fewest_invented_numbers, weighted_objective
out, write = Path(sys.argv[1]), sys.argv[2] == "--write"
metadata_path = Path("models/default/metadata.json")
metadata = json.loads(metadata_path.read_text(encoding="utf-8"))
for pair, tuned in metadata["decoding"]["directions"].items():
    trials = []
    for report in sorted(out.glob("p*.json")):
        decoding = json.loads(report.read_text(encoding="utf-8"))["decoding"]["directions"][pair]
        results = [r for r in json.loads(report.read_text(encoding="utf-8"))["results"] if r["direction"] == pair]
        setting = Setting(decoding["length_penalty"], decoding["no_repeat_ngram_size"], decoding["reconstruction_weight"],
                          decoding["invented_number_penalty"])
        trials.append(Trial(setting, round(weighted_objective(results, {}), 3), 0, results))
        print(f"{pair} penalty {setting.invented_number_penalty:g}: objective {trials[-1].objective:.3f}, "
              f"invented numbers {trials[-1].invented_numbers}, missing {sum(r['numbers']['missing'] for r in results)}")
    chosen = fewest_invented_numbers(trials[0], trials[1:])
    print(f"{pair} chosen: invented_number_penalty {chosen.setting.invented_number_penalty:g}")
    tuned.update(invented_number_penalty=chosen.setting.invented_number_penalty, objective=chosen.objective,
                 invented_numbers=chosen.invented_numbers)
metadata["decoding"]["chosen_on"]["invented_number_penalty"] = "session 36: bench/results/session36/numbers-dev300.sh"
if write:
    metadata_path.write_text(json.dumps(metadata, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {metadata_path}")
PY
