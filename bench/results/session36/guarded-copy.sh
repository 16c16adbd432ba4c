#!/usr/bin/env bash
# runs/s36/v14-numbers: release v14 (models/default) with the number penalties the tuner's rule chose for the first
# guard version (numbers-dev300.sh: ko-en 3, en-ko 2) in its metadata, as models/default held them while
# serve.sh and eval.sh ran. The guard's code at that time was commit 5d8a89e (before numbers_meant).
set -eu
cd "$(dirname "$0")/../../.."
rm -rf runs/s36/v14-numbers && mkdir -p runs/s36 && cp -r models/default runs/s36/v14-numbers
.venv/bin/python - <<'PY'
import json
from pathlib import Path
path = Path("runs/s36/v14-numbers/metadata.json")
metadata = json.loads(path.read_text(encoding="utf-8"))
for pair, penalty in {"ko-en": 3.0, "en-ko": 2.0}.items():
    metadata["decoding"]["directions"][pair]["invented_number_penalty"] = penalty
path.write_text(json.dumps(metadata, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
PY
