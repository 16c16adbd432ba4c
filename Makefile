# Every job of the project, from raw parallel text to a served model. `make help` lists them.
PYTHON   ?= python3
VENV     ?= .venv
PY       := $(VENV)/bin/python
DATA_DIR ?= ../shared/data
CONFIG   ?= configs/release.yaml
RUN_DIR  ?= runs/$(basename $(notdir $(CONFIG)))
MODEL    ?= models/default
RELEASE_FROM ?= $(RUN_DIR)/best
FORK_FROM ?= $(lastword $(sort $(wildcard $(RUN_DIR)/checkpoints/step-*)))
COOLDOWN_STEPS ?= 600
NPROC    ?= 1
HOST     ?= 127.0.0.1
PORT     ?= 50051
HTTP_HOST ?= 127.0.0.1
HTTP_PORT ?= 8080
PRECISION ?= fp32
DEVICE   ?= auto
INIT_FROM ?=
MODELS   ?=
AVERAGE_OUT ?= runs/soup
WEIGHTS  ?=
ENCODER_LAYERS ?=
DECODER_LAYERS ?=
FFN_DIM  ?=
NEW_UNITS_FROM ?=
GROW_OUT ?= runs/grown/$(notdir $(MODEL))
THREADS  ?=
BENCH_THREADS ?= 2
NOISY    ?=
SOAK_MINUTES ?= 20
MBR_SENTENCES ?= 300
TEXT     ?= 나는 학생입니다
SRC      ?= ko
TGT      ?= en
KIND     ?= cross
LAYER    ?= -1
HEAD     ?= mean
BT_INPUT ?= ../shared/mono/ko-kowiki/text.ko
BT_LANG  ?= ko
BT_DIR   ?= runs/bt
BT_OUT   ?= $(BT_DIR)/$(notdir $(patsubst %/,%,$(dir $(BT_INPUT))))
BT_LIMIT ?=
BT_SEARCH ?= beam
BT_TOP_K ?=
BT_THREADS ?= 2
# One process, or NPROC processes under torchrun (DDP training, sharded back-translation).
LAUNCH   = $(if $(filter 1,$(NPROC)),$(PY),$(VENV)/bin/torchrun --standalone --nproc_per_node=$(NPROC))
export DATA_DIR BT_DIR HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1

.PHONY: help install proto test data train cooldown backtranslate eval compare speech-levels average grow release serve translate plot-attention bench bench-decode bench-serve bench-train bench-profile bench-kernel-cache bench-continuous bench-mbr soak tune-decoding gpu-carry gpu-check gpu-train-carry gpu-train clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed proto  ## create .venv and install the project (CPU torch 2.13.0)

proto: $(VENV)/.installed  ## generate the gRPC Python stubs from proto/
	$(PY) -m serving.protogen

test: install  ## run the test suite (pytest's "no tests collected" counts as success)
	$(PY) -m pytest; status=$$?; if [ $$status -eq 5 ]; then exit 0; else exit $$status; fi

data: install  ## load, clean and tokenize the recipe's corpora into $(RUN_DIR)/data
	$(PY) -m training.prepare --config $(CONFIG) --run-dir $(RUN_DIR)

train: data  ## train on CUDA if present (NPROC>1: torchrun DDP); resumes from $(RUN_DIR); INIT_FROM=MODEL_DIR warm-starts a fresh run; THREADS=N per process
	$(LAUNCH) -m training.train --config $(CONFIG) --run-dir $(RUN_DIR) $(if $(INIT_FROM),--init-from $(INIT_FROM)) $(if $(THREADS),--threads $(THREADS))

backtranslate: install  ## translate BT_INPUT (language BT_LANG) with $(MODEL) into the corpus folder BT_OUT (BT_SEARCH=sample BT_TOP_K=10: top-k sampling); resumable
	$(LAUNCH) -m training.backtranslate --model $(MODEL) --input $(BT_INPUT) --lang $(BT_LANG) --out $(BT_OUT) --search $(BT_SEARCH) $(if $(BT_TOP_K),--top-k $(BT_TOP_K)) --precision $(PRECISION) --threads $(BT_THREADS) $(if $(BT_LIMIT),--limit $(BT_LIMIT))

eval: install  ## BLEU/chrF of $(MODEL) on the recipe's dev and test sets, report in $(MODEL)/eval.json
	$(PY) -m training.evaluate --config $(CONFIG) --model $(MODEL)

compare: install  ## paired significance of eval reports: make compare REPORTS="base.json new.json ..." (first = baseline)
	$(PY) -m training.compare $(REPORTS)

speech-levels: install  ## formal/polite/plain endings of translations into Korean against their references: make speech-levels REPORTS="a.json ..."
	$(PY) -m training.speech_levels $(REPORTS)

tune-decoding: install  ## choose $(MODEL)'s length penalty, no-repeat n-gram size, reranking weight and invented-number penalty on the recipe's dev sets (into its metadata.json); TUNE_SET_WEIGHTS=flores-dev=2,...
	$(PY) -m training.tune_decoding --config $(CONFIG) --model $(MODEL) $(if $(TUNE_LIMIT),--limit $(TUNE_LIMIT)) \
	  $(if $(TUNE_SET_WEIGHTS),--set-weights $(TUNE_SET_WEIGHTS)) --write

cooldown: install  ## fork $(RUN_DIR) at FORK_FROM (its newest checkpoint) into $(RUN_DIR)-cooldown; lr to 0 over COOLDOWN_STEPS
	$(PY) -m training.train --config $(CONFIG) --run-dir $(RUN_DIR)-cooldown --fork-from $(FORK_FROM) --cooldown-steps $(COOLDOWN_STEPS)

average: install  ## average the last checkpoints of $(RUN_DIR) into $(RUN_DIR)/averaged; MODELS="DIR ..." AVERAGE_OUT=DIR: a soup of runs (WEIGHTS="1 3": a weighted one)
	$(PY) -m training.average $(if $(MODELS),--models $(MODELS) --out $(AVERAGE_OUT) $(if $(WEIGHTS),--weights $(WEIGHTS)),--run-dir $(RUN_DIR))

grow: install  ## $(MODEL) deepened to ENCODER_LAYERS / DECODER_LAYERS and widened to FFN_DIM, silently (translates as before), into GROW_OUT, to warm-start a larger recipe; NEW_UNITS_FROM=WIDE: new units take WIDE's W₁ rows, to average with WIDE
	$(PY) -m training.grow --model $(MODEL) --out $(GROW_OUT) $(if $(ENCODER_LAYERS),--encoder-layers $(ENCODER_LAYERS)) $(if $(DECODER_LAYERS),--decoder-layers $(DECODER_LAYERS)) $(if $(FFN_DIM),--ffn-dim $(FFN_DIM)) $(if $(NEW_UNITS_FROM),--new-units-from $(NEW_UNITS_FROM))

release: install  ## publish RELEASE_FROM (default $(RUN_DIR)/best) as models/default, fp16 weights; DECODING_FROM=DIR keeps DIR's decoding defaults
	$(PY) -m training.release --model $(RELEASE_FROM) --out models/default --run-dir $(RUN_DIR) $(if $(DECODING_FROM),--decoding-from $(DECODING_FROM))

serve: install  ## serve $(MODEL) over gRPC on $(HOST):$(PORT) and HTTP (API, web page) on $(HTTP_HOST):$(HTTP_PORT), on DEVICE=auto|cpu|cuda
	$(PY) -m serving.server --model $(MODEL) --host $(HOST) --port $(PORT) --http-host $(HTTP_HOST) --http-port $(HTTP_PORT) --precision $(PRECISION) --device $(DEVICE)

translate: install  ## translate TEXT through the running server
	$(PY) -m serving.client --target $(HOST):$(PORT) --source-lang $(SRC) --target-lang $(TGT) "$(TEXT)"

plot-attention: install  ## PNG heatmap of TEXT's attention: KIND=cross|encoder|decoder, LAYER (-1: last), HEAD=N|mean
	$(PY) -m nmt.plot_attention --model $(MODEL) --source-lang $(SRC) --target-lang $(TGT) --text "$(TEXT)" --kind $(KIND) --layer $(LAYER) --head $(HEAD) --out attention.png

$(VENV)/.bench-installed: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install -q -e '.[test,bench]' torch==2.13.0
	touch $@

bench: bench-decode bench-serve bench-train  ## all three benchmarks; results in .bench/, write-up in BENCHMARKS.md

bench-decode: install $(VENV)/.bench-installed  ## beam-4 decoding of $(MODEL): ours fp32/int8/bf16 vs HF generate and CTranslate2
	$(PY) -m bench.decode --model $(MODEL) --dev $(RUN_DIR)/data/dev.jsonl --threads $(BENCH_THREADS) --device $(DEVICE)

bench-serve: install  ## the gRPC server under 1, 16 and 32 clients, batching on and off; NOISY=1: fp32 quiet vs beside a busy CPU
	$(PY) -m bench.serve --model $(MODEL) --dev $(RUN_DIR)/data/dev.jsonl --threads $(BENCH_THREADS) \
		$(if $(NOISY),--noisy-neighbour --precisions fp32 --batching on)

soak: install  ## drive the server for SOAK_MINUTES with a mixed load; fails on lost requests or growing memory
	$(PY) -m bench.soak --model $(MODEL) --dev $(RUN_DIR)/data/dev.jsonl --threads $(BENCH_THREADS) --minutes $(SOAK_MINUTES)

bench-train: install  ## training-step tokens/s of $(CONFIG) and its FLOP/s against a measured matmul peak
	$(PY) -m bench.train --config $(CONFIG) --run-dir $(RUN_DIR) --threads $(BENCH_THREADS) --device $(DEVICE)

bench-profile: install  ## where our decoding time goes (torch.profiler), batch 1 and 32
	$(PY) -m bench.profile --model $(MODEL) --dev $(RUN_DIR)/data/dev.jsonl --threads $(BENCH_THREADS)

bench-kernel-cache: install  ## resident memory and speed of decoding $(MODEL) against the oneDNN kernel-cache capacity
	$(PY) -m bench.kernel_cache --model $(MODEL) --dev $(RUN_DIR)/data/dev.jsonl --threads $(BENCH_THREADS)

bench-continuous: install  ## the server's step-level search alone: sentences/s with 1, 8 and 32 sentences in flight
	$(PY) -m bench.continuous --model $(MODEL) --dev $(RUN_DIR)/data/dev.jsonl --threads $(BENCH_THREADS)

bench-mbr: install  ## MBR reranking of $(MODEL)'s beam n-best (chrF, BLEU utilities) against MAP and the n-best's oracle on every dev set, first MBR_SENTENCES lines
	$(PY) -m bench.mbr --model $(MODEL) --dev $(RUN_DIR)/data/dev.jsonl --threads $(BENCH_THREADS) --sentences $(MBR_SENTENCES)

gpu-carry: install  ## for a GPU session: the wheels its image lacks and the release data, compressed, into .gpu-carry/
	bash bench/cuda_session.sh prepare

gpu-check:  ## on a CUDA machine: pytest -m cuda, bench-decode and bench-train there; results in $$OUT (default .gpu-out/)
	bash bench/cuda_session.sh

gpu-train-carry: install  ## for a GPU training session: the wheels its image lacks and $(RUN_DIR)'s prepared data, xz, into .gpu-carry/ (make data first)
	bash training/cuda_train.sh prepare $(RUN_DIR)

gpu-train:  ## on a CUDA machine: train $(CONFIG) from INIT_FROM (default models/default) for MINUTES (5), cool, release fp16 in shards into $$OUT/model
	CONFIG=$(CONFIG) RUN=$(RUN_DIR) $(if $(INIT_FROM),INIT_FROM=$(INIT_FROM)) bash training/cuda_train.sh

clean:  ## remove generated stubs and caches (keeps .venv and runs/)
	rm -rf serving/generated .pytest_cache
	find . -name __pycache__ -prune -exec rm -rf {} +
