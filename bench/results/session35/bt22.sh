#!/usr/bin/env bash
# Back-translation round 3 made again by release v12 (git c47ca52), as configs/ablation/bt-v12.yaml documents.
set -eu
cd /work/main
mkdir -p runs/v12 runs/mono22
for f in config.json metadata.json model.safetensors spm.model; do
  [ -s runs/v12/$f ] || git show c47ca52:models/default/$f > runs/v12/$f
done
seed() { yes 22 | head -c 100000000; }
sample() {  # sample NAME FILE N
  [ -s runs/mono22/$1.$4 ] || awk 'length($0)>=20 && length($0)<=250' "$2" | shuf -n "$3" --random-source=<(seed) > runs/mono22/$1.$4
}
sample kowiki-50k ../shared/mono/ko-kowiki/text.ko 50000 ko
sample kluedev-10k ../shared/mono/ko-kluedev/text.ko 10000 ko
sample enwikinews-30k ../shared/mono/en-enwikinews/text.en 30000 en
sample enwiki-30k ../shared/mono/en-enwiki/text.en 30000 en
for name in kowiki-50k:ko kluedev-10k:ko enwikinews-30k:en enwiki-30k:en; do
  n=${name%%:*} l=${name##*:}
  make backtranslate MODEL=runs/v12 BT_INPUT=runs/mono22/$n.$l BT_LANG=$l BT_OUT=runs/bt22/$n BT_SEARCH=sample BT_TOP_K=10
done
echo done
