"""The training loop: bucketed batches, label-smoothed loss, warm-up schedule, dev BLEU, exact resume, DDP.

One process trains on its own; under ``torchrun`` every process holds a DDP replica and takes every
N-th batch, rank 0 evaluates and writes checkpoints, and the decision to stop is shared by broadcast.

A step never waits for the host: batches are padded by a background thread (pinned, copied asynchronously on
GPUs), and the loss sums stay on the device until the loop logs them, every ``log_every`` steps.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from nmt.loss import label_smoothed_nll
from nmt.model import Transformer
from nmt.precision import cpu_has_bf16
from nmt.search import SearchOptions
from nmt.tokenizer import Tokenizer
from nmt.translator import Translator
from training.batching import TokenTable, pad_batch, prefetched, shard, token_batches
from training.evaluate import score
from nmt.memory import release_free_memory
from training.metrics import MetricsLog, plot_curves
from training.optim import build_optimizer, learning_rate_schedule
from training.state import Progress, checkpoint_dirs, clear_staging, export_model, restore_checkpoint, save_checkpoint


# The math kernel spells attention out in matrix products; "fused" lets PyTorch pick its flash kernel.
CPU_ATTENTION_KERNELS = {"math": [SDPBackend.MATH], "fused": [SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]}


@dataclass
class TrainingConfig:
    max_tokens: int = 4096  # per batch: sentences × longest(source, target)
    update_freq: int = 1  # batches accumulated per optimizer step
    lr: float = 1e-3  # peak, reached at the end of warm-up
    betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-8
    weight_decay: float = 0.0
    warmup_steps: int = 1000
    label_smoothing: float = 0.1
    clip_norm: float = 1.0
    max_steps: int = 100_000
    cooldown_start: int | None = None  # with cooldown_steps: the learning rate falls linearly to 0 from this step ...
    cooldown_steps: int = 0  # ... over this many steps, and training stops there (training.optim)
    max_epochs: int = 1000
    max_minutes: float | None = None  # stop (with a checkpoint) after this much wall clock in one invocation
    bf16: bool | None = None  # autocast to bfloat16 (faster on AVX-512-BF16/AMX CPUs and GPUs); None: on GPUs only;
    # a CPU without bf16 kernels trains in fp32 whatever this says (emulated bf16 is slower, and no more accurate)
    compile: bool = False  # torch.compile the model for training steps
    cpu_attention: str = "math"  # attention kernel on CPU: "math" or "fused"; A/B them with make bench-train
    seed: int = 1
    log_every: int = 50
    eval_every: int = 1000
    save_every: int = 500
    keep_last: int = 5
    patience: int = 10  # evaluations without a better dev score before stopping
    dev_sets: list[str] = field(default_factory=list)  # corpora used for dev loss/BLEU; empty = all dev sets
    dev_max_sentences: int = 200  # per set and direction, to keep evaluation short
    dev_beam_size: int = 4
    progress_bar: bool = True

    def __post_init__(self) -> None:
        self.betas = tuple(self.betas)
        if self.cpu_attention not in CPU_ATTENTION_KERNELS:
            raise ValueError(f"cpu_attention must be one of {', '.join(CPU_ATTENTION_KERNELS)}, got {self.cpu_attention!r}")
        if self.cooldown_start is not None:
            if self.cooldown_steps < 1:
                raise ValueError(f"a cooldown needs cooldown_steps ≥ 1, got {self.cooldown_steps}")
            self.max_steps = min(self.max_steps, self.cooldown_start + self.cooldown_steps)


@dataclass
class Batch:
    """One batch as the model takes it: right-padded ids (pinned host memory on GPUs, or on the device)."""

    source: torch.Tensor
    target: torch.Tensor
    labels: int  # target tokens the loss counts (BOS excluded)


@dataclass
class UpdateStats:
    """One update's sums, left on the device: reading them makes the host wait for the device."""

    loss_sum: torch.Tensor
    nll_sum: torch.Tensor
    grad_norm: torch.Tensor
    tokens: int

    def read(self) -> dict:
        """Per-token loss and NLL, the update's tokens and its gradient norm, as Python numbers."""
        return read_all([self])[0]


def read_all(updates: Sequence[UpdateStats]) -> list[dict]:
    """:meth:`UpdateStats.read` for many updates with one transfer from the device."""
    if not updates:
        return []
    values = torch.stack([torch.stack([u.loss_sum, u.nll_sum, u.grad_norm.double()]) for u in updates]).tolist()
    return [{"loss": loss / u.tokens, "nll": nll / u.tokens, "tokens": u.tokens, "grad_norm": grad_norm}
            for u, (loss, nll, grad_norm) in zip(updates, values)]


@dataclass
class DevPair:
    corpus: str
    source_lang: str
    target_lang: str
    source: str
    target: str

    @property
    def key(self) -> str:
        return f"{self.corpus}.{self.source_lang}-{self.target_lang}"


@dataclass
class Distributed:
    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def select_dev_pairs(pairs: Sequence[DevPair], config: TrainingConfig) -> list[DevPair]:
    """The first ``dev_max_sentences`` of each chosen dev set and direction."""
    taken: dict[str, int] = defaultdict(int)
    chosen = []
    for pair in pairs:
        if config.dev_sets and pair.corpus not in config.dev_sets:
            continue
        if taken[pair.key] < config.dev_max_sentences:
            taken[pair.key] += 1
            chosen.append(pair)
    return chosen


class Trainer:
    def __init__(
        self,
        model: Transformer,
        tokenizer: Tokenizer,
        sources: Sequence[Sequence[int]],
        targets: Sequence[Sequence[int]],
        dev_pairs: Sequence[DevPair],
        config: TrainingConfig,
        run_dir: Path,
        metadata: dict,
        distributed: Distributed = Distributed(),
    ):
        self.model, self.tokenizer, self.config, self.run_dir = model, tokenizer, config, Path(run_dir)
        self.metadata, self.distributed = metadata, distributed
        self.sources, self.targets = TokenTable(sources), TokenTable(targets)
        self.source_lengths, self.target_lengths = self.sources.lengths, self.targets.lengths
        self.dev_pairs = select_dev_pairs(dev_pairs, config)
        self.device = next(model.parameters()).device
        on_gpu = self.device.type == "cuda"
        self.bf16 = on_gpu if config.bf16 is None else config.bf16
        if self.bf16 and not on_gpu and not cpu_has_bf16():
            if distributed.is_main:
                print("training in fp32: the recipe asks for bf16, and this CPU has no bf16 kernels", flush=True)
            self.bf16 = False
        schedule = learning_rate_schedule(config.warmup_steps, config.cooldown_start, config.cooldown_steps)
        self.optimizer, self.scheduler = build_optimizer(
            model, config.lr, config.betas, config.adam_eps, config.weight_decay, schedule, fused=on_gpu
        )
        network = DistributedDataParallel(model, device_ids=[self.device.index] if on_gpu else None) if distributed.world_size > 1 else model
        self.network = torch.compile(network) if config.compile else network
        # NCCL reduces only GPU tensors, and reading one back waits for the step: the per-step stop flag goes over gloo.
        self.host_group = dist.new_group(backend="gloo") if distributed.world_size > 1 and on_gpu else None
        self.progress = Progress()

    # ---- state -------------------------------------------------------------------------------------------

    def resume(self) -> bool:
        """Continue from the newest complete checkpoint in the run directory, if there is one."""
        if self.distributed.is_main:
            (self.run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
            clear_staging(self.run_dir)
        self.barrier()
        found = checkpoint_dirs(self.run_dir)
        if found:
            self.progress = restore_checkpoint(found[-1], self.model, self.optimizer, self.scheduler)
        return bool(found)

    def save(self) -> Path | None:
        path = None
        if self.distributed.is_main:
            metadata = {**self.metadata, "training": {**self.metadata.get("training", {}), "progress": asdict(self.progress)}}
            path = save_checkpoint(
                self.run_dir, self.model, self.tokenizer, metadata, self.optimizer, self.scheduler, self.progress, self.config.keep_last
            )
        self.barrier()
        return path

    def barrier(self) -> None:
        if self.distributed.world_size > 1:
            dist.barrier()

    # ---- one update --------------------------------------------------------------------------------------

    def autocast(self) -> contextlib.ExitStack:
        """bf16 autocast when the recipe asks for it and, on CPU, the chosen attention kernel: for sentence-length
        sequences the math kernel makes a training step faster than the fused one (BENCHMARKS.md, Training)."""
        context = contextlib.ExitStack()
        context.enter_context(torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16))
        if self.device.type == "cpu":
            context.enter_context(sdpa_kernel(CPU_ATTENTION_KERNELS[self.config.cpu_attention]))
        return context

    def batch(self, indices: np.ndarray) -> Batch:
        """The examples ``indices`` padded on the host; pinned on GPUs so that the copy to the device is asynchronous."""
        pad = self.tokenizer.pad_id
        source, target = self.sources.pad(indices, pad), self.targets.pad(indices, pad)
        if self.device.type == "cuda":
            source, target = source.pin_memory(), target.pin_memory()
        return Batch(source, target, int(self.target_lengths[indices].sum() - len(indices)))

    def batch_groups(self, groups: Sequence[Sequence[np.ndarray]]) -> Iterator[list[Batch]]:
        """The batches of each update, padded by a background thread ahead of the step that needs them."""
        return prefetched(lambda group: [self.batch(indices) for indices in group], groups)

    def update(self, batches: Sequence[Batch]) -> UpdateStats:
        """Forward/backward over ``update_freq`` batches, then one clipped optimizer step; nothing waits for the device."""
        self.network.train()
        self.optimizer.zero_grad(set_to_none=True)
        tokens = sum(b.labels for b in batches)
        loss_sum = nll_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        for i, batch in enumerate(batches):
            source = batch.source.to(self.device, non_blocking=True)
            target = batch.target.to(self.device, non_blocking=True)
            last = i == len(batches) - 1
            sync = contextlib.nullcontext() if last or self.distributed.world_size == 1 else self.network.no_sync()
            with sync:
                with self.autocast():
                    logits = self.network(source, target[:, :-1])
                loss, nll = label_smoothed_nll(logits, target[:, 1:], self.config.label_smoothing, self.tokenizer.pad_id)
                (loss / tokens).backward()
            # float64 sums of the float32 losses: the numbers Python floats gave when every batch was read at once
            loss_sum, nll_sum = loss_sum + loss.detach().double(), nll_sum + nll.detach().double()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.clip_norm)
        self.optimizer.step()
        self.scheduler.step()
        return UpdateStats(loss_sum, nll_sum, grad_norm.detach(), tokens)

    # ---- evaluation --------------------------------------------------------------------------------------

    @torch.inference_mode()
    def dev_nll(self) -> float:
        """Teacher-forced NLL per target token on the dev selection."""
        self.model.eval()
        total = tokens = 0.0
        examples = [
            (self.tokenizer.source_ids(p.source, p.target_lang, self.model.config.max_positions),
             self.tokenizer.target_ids(p.target, self.model.config.max_positions))
            for p in self.dev_pairs
        ]
        for start in range(0, len(examples), 64):
            chunk = examples[start : start + 64]
            source = pad_batch([s for s, _ in chunk], self.tokenizer.pad_id).to(self.device)
            target = pad_batch([t for _, t in chunk], self.tokenizer.pad_id).to(self.device)
            with self.autocast():
                logits = self.model(source, target[:, :-1])
            total += float(label_smoothed_nll(logits, target[:, 1:], 0.0, self.tokenizer.pad_id)[1])
            tokens += int((target[:, 1:] != self.tokenizer.pad_id).sum())
        return total / max(tokens, 1)

    def evaluate(self) -> dict:
        """Dev NLL plus BLEU/chrF of real beam-search translations for each dev set and direction."""
        record: dict = {"kind": "dev", "step": self.progress.step, "dev_nll": self.dev_nll()}
        translator = Translator(self.model, self.tokenizer, self.metadata)
        options = SearchOptions(beam_size=self.config.dev_beam_size)
        groups: dict[str, list[DevPair]] = defaultdict(list)
        for pair in self.dev_pairs:
            groups[pair.key].append(pair)
        bleus = []
        for key, pairs in groups.items():
            hypotheses = translator.translate([p.source for p in pairs], pairs[0].source_lang, pairs[0].target_lang, options)
            scores = score([h.text for h in hypotheses], [p.target for p in pairs], pairs[0].target_lang)
            record[f"bleu/{key}"], record[f"chrf/{key}"] = round(scores["bleu"], 2), round(scores["chrf"], 2)
            bleus.append(scores["bleu"])
        record["bleu"] = float(np.mean(bleus)) if bleus else -record["dev_nll"]
        self.model.train()
        return record

    def after_evaluation(self, record: dict) -> bool:
        """Track the best checkpoint (by mean dev BLEU); True when patience has run out."""
        improved = record["bleu"] > self.progress.best_score
        if improved:
            self.progress.best_score, self.progress.best_step = record["bleu"], self.progress.step
            self.progress.evals_without_improvement = 0
        else:
            self.progress.evals_without_improvement += 1
        path = self.save()
        if improved and path is not None:
            export_model(path, self.run_dir / "best")
        return self.progress.evals_without_improvement >= self.config.patience

    # ---- the loop ----------------------------------------------------------------------------------------

    def interrupted(self) -> bool:
        """Whether SIGTERM/SIGINT arrived (on any rank: the ranks must stop at the same step)."""
        if self.distributed.world_size == 1:
            return self.stop_requested
        flag = torch.tensor([float(self.stop_requested)])  # on the host, so asking never waits for the GPU
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.host_group)
        return bool(flag.item())

    def request_stop(self, signum: int, frame) -> None:
        tqdm.write(f"{signal.Signals(signum).name}: finishing this step, then evaluating and saving a checkpoint")
        self.stop_requested = True

    def fit(self) -> Progress:
        """Train until max_steps, max_epochs, max_minutes, early stopping or SIGTERM/SIGINT; always ends on a checkpoint."""
        config, progress, main = self.config, self.progress, self.distributed.is_main
        self.stop_requested = False
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, self.request_stop)
        log = MetricsLog(self.run_dir / "metrics.jsonl", progress.step) if main else None
        started, budget = time.monotonic(), (config.max_minutes or math.inf) * 60
        start_seconds = progress.train_seconds
        bar = tqdm(total=config.max_steps, initial=progress.step, disable=not (main and config.progress_bar), unit="step", dynamic_ncols=True)
        window: list[UpdateStats] = []  # the updates since the last log, read from the device all at once
        window_start = time.monotonic()
        stop = progress.step >= config.max_steps
        while not stop and progress.epoch < config.max_epochs:
            batches = shard(
                token_batches(self.source_lengths, self.target_lengths, config.max_tokens, config.seed, progress.epoch),
                self.distributed.rank,
                self.distributed.world_size,
            )
            starts = range(progress.batch_in_epoch, len(batches) - config.update_freq + 1, config.update_freq)
            groups = [batches[start : start + config.update_freq] for start in starts]
            with contextlib.closing(self.batch_groups(groups)) as prepared:
                for group in prepared:
                    window.append(self.update(group))
                    progress.step += 1
                    progress.batch_in_epoch += config.update_freq
                    progress.train_seconds = start_seconds + time.monotonic() - started
                    lr = self.scheduler.get_last_lr()[0]
                    bar.update(1)
                    if progress.step % config.log_every == 0:
                        record = self.train_record(read_all(window), time.monotonic() - window_start, lr)
                        bar.set_postfix(loss=f"{record['loss']:.3f}", tok_s=f"{record['tokens_per_s']:.0f}", lr=f"{lr:.2e}")
                        window, window_start = [], time.monotonic()
                        release_free_memory()
                        if log:
                            log.write(record)
                    out_of_time = time.monotonic() - started > budget
                    stop = progress.step >= config.max_steps or out_of_time or self.interrupted()
                    if progress.step % config.eval_every == 0 or stop:
                        stop = self.evaluate_and_decide(log) or stop
                    elif progress.step % config.save_every == 0:
                        self.save()
                    if stop:
                        break
            if progress.batch_in_epoch + config.update_freq > len(batches):
                progress.epoch += 1
                progress.batch_in_epoch = 0
        bar.close()
        if self.distributed.world_size > 1:
            self.check_replicas_agree()
        return progress

    def train_record(self, updates: list[dict], seconds: float, lr: float) -> dict:
        """Loss and NLL per label token over a whole logging window (not just its last batch), and its speed."""
        labels = sum(u["tokens"] for u in updates)
        progress = self.progress
        return {"kind": "train", "step": progress.step, "epoch": progress.epoch,
                "loss": sum(u["loss"] * u["tokens"] for u in updates) / labels,
                "nll": sum(u["nll"] * u["tokens"] for u in updates) / labels,
                "grad_norm": updates[-1]["grad_norm"], "lr": lr, "tokens_per_s": labels * self.distributed.world_size / seconds,
                "seconds": round(progress.train_seconds, 1)}

    def check_replicas_agree(self) -> None:
        """Every DDP rank must end with bit-identical weights; a mismatch means the replicas diverged."""
        digest = hashlib.sha256()
        for tensor in self.model.state_dict().values():
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        digests: list[str | None] = [None] * self.distributed.world_size
        dist.all_gather_object(digests, digest.hexdigest())
        if len(set(digests)) != 1:
            raise RuntimeError(f"DDP replicas diverged: weight digests {digests}")
        if self.distributed.is_main:
            print(f"all {self.distributed.world_size} replicas hold identical weights ({digests[0][:12]})", flush=True)

    def evaluate_and_decide(self, log: MetricsLog | None) -> bool:
        """Rank 0 evaluates, saves and decides whether to stop early; every rank learns the decision."""
        decision = [False]
        if self.distributed.is_main:
            # Evaluation must leave the training's random stream untouched (some kernels draw from it when
            # first used), or a run that stopped and evaluated at step N would resume differently.
            with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
                record = self.evaluate()
            decision[0] = self.after_evaluation(record)
            record["best_step"] = self.progress.best_step
            log.write(record)
            plot_curves(log.records(), self.run_dir / "curves.png")
            tqdm.write(" ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in record.items()))
        else:
            self.save()
        if self.distributed.world_size > 1:
            dist.broadcast_object_list(decision, src=0)
        return decision[0]
