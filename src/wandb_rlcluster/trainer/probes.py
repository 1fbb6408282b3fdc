"""Live probes: what only a running trainer can measure, sampled so the cost stays bounded.

Each probe returns a dict of live-input keys (see ``core.keys.LIVE_INPUT_KEYS``)
that the callback merges into the next log row, so the same gauges judge
them live and, after a read-back from W&B, offline.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any

import torch


def _unwrap(model: Any) -> Any:
    """The module that owns the weights (through DDP's ``.module``)."""
    while hasattr(model, "module") and isinstance(model.module, torch.nn.Module):
        model = model.module
    return model


# Gradient statistics: trainer/sharded_grads.py (one process, DDP, FSDP2 and ZeRO alike).


# -- attention entropy ---------------------------------------------------------------------------


def make_probe_batch(tokenizer: Any, vocab_size: int, seq_len: int = 32, seed: int = 0) -> dict[str, torch.Tensor]:
    """A small fixed batch: two fixed sentences through the tokenizer, or seeded random ids."""
    tok = getattr(tokenizer, "tokenizer", tokenizer)  # processors carry a tokenizer
    texts = [
        "The quick brown fox jumps over the lazy dog while the model learns to reason step by step.",
        "Question: what is twelve plus thirty? Answer: forty-two is wrong, the answer is forty-two minus zero.",
    ]
    if tok is not None and callable(tok):
        try:
            enc = tok(texts, return_tensors="pt", padding=True, truncation=True, max_length=seq_len)
            ids = enc["input_ids"]
            if ids.shape[1] >= 4 and int(ids.max()) < vocab_size:
                return {"input_ids": ids, "attention_mask": enc.get("attention_mask", torch.ones_like(ids))}
        except Exception:  # noqa: BLE001 - fall back to random ids
            pass
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, max(2, vocab_size), (2, seq_len), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def _base_model(model: Any) -> Any:
    model = _unwrap(model)
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def attention_entropy(model: Any, batch: dict[str, torch.Tensor]) -> dict[str, float]:
    """Mean attention entropy H = -Σ α log α of a probe batch, over layers, heads and query positions.

    Attention probabilities exist only with eager attention (SDPA and FlashAttention
    never materialise them), so the model is switched to eager for the probe and back.
    The probabilities are used as returned: they are already normalised.
    """
    base = _base_model(model)
    config = getattr(base, "config", None)
    impl = getattr(config, "_attn_implementation", "eager") if config is not None else "eager"
    switched = False
    if impl != "eager":
        setter = getattr(base, "set_attn_implementation", None)
        if not callable(setter):
            return {}
        setter("eager")
        switched = True
    was_training = model.training
    try:
        device = next(model.parameters()).device
        ids = batch["input_ids"].to(device)
        mask = batch["attention_mask"].to(device)
        model.eval()
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, output_attentions=True, use_cache=False)
        atts = getattr(out, "attentions", None)
        if not atts:
            return {}
        head_means = []
        q_mask = mask.bool()
        for a in atts:
            if a is None:
                continue
            p = a.float().clamp_min(0)
            h = -torch.special.xlogy(p, p).sum(-1)  # [B, H, Q]
            qm = q_mask[:, None, :].expand_as(h)
            per_head = (h * qm).sum(dim=(0, 2)) / qm.sum(dim=(0, 2)).clamp_min(1)
            head_means.append(per_head)
        if not head_means:
            return {}
        heads = torch.cat(head_means)
        # Under a causal mask query i sees i+1 keys: uniform attention would give log(i+1).
        n_keys = mask.long().cumsum(-1).clamp_min(1).float()
        max_h = (torch.log(n_keys) * mask).sum() / mask.sum().clamp_min(1)
        return {
            "attention_entropy/mean": float(heads.mean()),
            "attention_entropy/head_std": float(heads.std()) if heads.numel() > 1 else 0.0,
            "attention_entropy/max_possible": float(max_h),
        }
    finally:
        if switched:
            base.set_attn_implementation(impl)
        model.train(was_training)


# -- LoRA ----------------------------------------------------------------------------------------


def lora_layers(model: Any) -> list[tuple[str, Any, str]]:
    """(name, module, adapter) for every PEFT LoRA layer of the active adapter."""
    out = []
    for name, module in _unwrap(model).named_modules():
        a, b = getattr(module, "lora_A", None), getattr(module, "lora_B", None)
        if a is None or b is None or not hasattr(a, "keys"):
            continue
        active = getattr(module, "active_adapters", None) or list(a.keys())
        for adapter in active:
            if adapter in a and adapter in b:
                out.append((name, module, adapter))
    return out


class LoraTracker:
    """‖B·A‖, effective rank and change since start for each LoRA layer, via r×r factors only."""

    def __init__(self) -> None:
        self.initial_a: dict[str, torch.Tensor] = {}

    def measure(self, model: Any) -> dict[str, float]:
        layers = lora_layers(model)
        if not layers:
            return {}
        norms, ranks, changes = [], [], []
        r_conf = 0
        with torch.no_grad():
            for name, module, adapter in layers:
                A = module.lora_A[adapter].weight.detach().float()  # r × in
                B = module.lora_B[adapter].weight.detach().float()  # out × r
                scale = module.scaling.get(adapter, 1.0) if isinstance(getattr(module, "scaling", None), dict) else 1.0
                r_conf = max(r_conf, A.shape[0])
                key = f"{name}:{adapter}"
                a_cpu = A.cpu()
                if key not in self.initial_a:
                    self.initial_a[key] = a_cpu.clone()
                a0 = self.initial_a[key]
                changes.append(float((a_cpu - a0).norm() / a0.norm().clamp_min(1e-12)))
                rb = torch.linalg.qr(B, mode="r")[1]  # r × r
                ra = torch.linalg.qr(A.T, mode="r")[1]  # r × r
                s = torch.linalg.svdvals(rb @ ra.T) * abs(scale)  # singular values of scale·B·A
                n = float(s.square().sum().sqrt())
                norms.append(n)
                if n > 1e-12:
                    p = s / s.sum()
                    ent = float(-(torch.special.xlogy(p, p)).sum())
                    ranks.append(math.exp(ent))
        mean = sum(norms) / len(norms)
        out = {"lora/norm_mean": mean, "lora/rank": float(r_conf), "lora/rel_change": sum(changes) / len(changes)}
        if mean > 0 and len(norms) > 1:
            var = sum((x - mean) ** 2 for x in norms) / (len(norms) - 1)
            out["lora/norm_cv"] = math.sqrt(var) / mean
        if ranks:
            out["lora/effective_rank"] = sum(ranks) / len(ranks)
        return out


# -- samples -------------------------------------------------------------------------------------

SAMPLE_PROMPTS = ("Once upon a time", "The answer to the question is")


def repetition_stats(token_lists: list[list[int]], n: int = 3) -> dict[str, float]:
    """Share of repeated n-grams (1 - distinct/total) and distinct-2 over generated tokens."""
    total = distinct = 0
    total2 = distinct2 = 0
    for toks in token_lists:
        grams = [tuple(toks[i:i + n]) for i in range(len(toks) - n + 1)]
        total += len(grams)
        distinct += len(set(grams))
        bigrams = [tuple(toks[i:i + 2]) for i in range(len(toks) - 1)]
        total2 += len(bigrams)
        distinct2 += len(set(bigrams))
    return {
        "samples/repetition_rate": 1.0 - distinct / total if total else 0.0,
        "samples/distinct_2": distinct2 / total2 if total2 else 1.0,
    }


def generate_samples(model: Any, tokenizer: Any, max_new_tokens: int = 32,
                     synced: bool = False) -> tuple[dict[str, float], list[list[Any]]]:
    """Greedy continuations of fixed prompts: repetition loops show up plainly under greedy decoding.

    ``synced``: every rank generates together (sharded parameters): each forward is a collective, so no rank may
    stop at its end-of-sequence while another still decodes (transformers' ``synced_gpus``)."""
    tok = getattr(tokenizer, "tokenizer", tokenizer)
    if tok is None or not callable(tok):
        return {}, []
    gen_model = _unwrap(model)
    was_training = gen_model.training
    try:
        device = next(gen_model.parameters()).device
        rows: list[list[Any]] = []
        new_tokens: list[list[int]] = []
        gen_model.eval()
        with torch.no_grad():
            for prompt in SAMPLE_PROMPTS:
                enc = tok(prompt, return_tensors="pt")
                ids = enc["input_ids"].to(device)
                out = gen_model.generate(
                    input_ids=ids, attention_mask=enc.get("attention_mask", torch.ones_like(ids)).to(device),
                    max_new_tokens=max_new_tokens, do_sample=False, **({"synced_gpus": True} if synced else {}),
                    pad_token_id=getattr(tok, "pad_token_id", None) or getattr(tok, "eos_token_id", None),
                )
                gen = out[0, ids.shape[1]:].tolist()
                new_tokens.append(gen)
                rows.append([prompt, tok.decode(gen, skip_special_tokens=True)])
        stats = repetition_stats(new_tokens)
        stats["samples/mean_chars"] = sum(len(r[1]) for r in rows) / max(1, len(rows))
        for r, toks in zip(rows, new_tokens, strict=True):
            r.append(repetition_stats([toks])["samples/repetition_rate"])
        return stats, rows
    finally:
        gen_model.train(was_training)


# -- efficiency ----------------------------------------------------------------------------------


class EfficiencyMeter:
    """Throughput from the wall clock between logs; process and device memory."""

    def __init__(self) -> None:
        self.last_time: float | None = None
        self.last_step = 0
        self.last_tokens: float | None = None
        self.util_ok = True
        self.calls = 0

    def measure(self, global_step: int, num_tokens: float | None) -> dict[str, float]:
        now = time.perf_counter()
        out: dict[str, float] = {}
        if self.last_time is not None and global_step > self.last_step:
            dt = now - self.last_time
            if dt > 0:
                out["efficiency/steps_per_s"] = (global_step - self.last_step) / dt
                if num_tokens is not None and self.last_tokens is not None and num_tokens >= self.last_tokens:
                    out["efficiency/tokens_per_s"] = (num_tokens - self.last_tokens) / dt
        if global_step > self.last_step or self.last_time is None:
            self.last_time, self.last_step = now, global_step
            self.last_tokens = num_tokens
        self.calls += 1
        if self.calls % 10 == 1:  # process memory moves slowly; reading it costs a syscall
            rss = _rss_gb()
            if rss is not None:
                out["efficiency/rss_gb"] = rss
        if torch.cuda.is_available():
            try:
                free, total = torch.cuda.mem_get_info()
                out["efficiency/mem_frac"] = 1.0 - free / total
            except Exception:  # noqa: BLE001 - a probe is optional: skip it
                pass
            if self.util_ok:
                try:
                    out["efficiency/util"] = float(torch.cuda.utilization()) / 100.0
                except Exception:  # noqa: BLE001 - needs pynvml
                    self.util_ok = False
        return out


_PROCESS: Any = None


def _rss_gb() -> float | None:
    global _PROCESS
    try:
        if _PROCESS is None or _PROCESS.pid != os.getpid():
            import psutil

            _PROCESS = psutil.Process(os.getpid())
        return _PROCESS.memory_info().rss / 1e9
    except Exception:  # noqa: BLE001 - psutil missing or the process gone: no reading
        return None


class ForwardProbes:
    """The callback's probes that run the model: LoRA adapters, attention entropy on a fixed batch, greedy samples.

    Each runs every N steps (0: off); a failing one is one warning through ``on_error``, never an exception."""

    def __init__(self, lora_every: int, attention_every: int, sample_every: int, sample_tokens: int,
                 on_error: Callable[[str, BaseException], None]) -> None:
        self.lora_every = lora_every
        self.attention_every = attention_every
        self.sample_every = sample_every
        self.sample_tokens = sample_tokens
        self.on_error = on_error
        self.batch: Any = None
        self.lora = LoraTracker()
        self.samples: list[list[Any]] = []  # the samples table's rows, until the next W&B write

    def run(self, model: Any, tokenizer: Any, step: int, live: dict[str, float], *, main: bool, together: bool,
            lora: bool, forward: bool) -> None:
        """The probes due at ``step``; their values go to ``live`` on the main process. ``together``: every rank
        runs the forward (sharded parameters); ``lora`` / ``forward``: whether those may run under this engine."""
        try:
            if main and lora and self.lora_every and step % self.lora_every == 0:
                live.update(self.lora.measure(model))
        except Exception as e:  # noqa: BLE001
            self.on_error("LoRA probe", e)
        if not forward:
            return
        try:
            if self.attention_every and step % self.attention_every == 0:
                if self.batch is None:
                    vocab = getattr(getattr(_base_model(model), "config", None), "vocab_size", 32) or 32
                    self.batch = make_probe_batch(tokenizer, vocab)
                entropy = attention_entropy(model, self.batch)
                if main:
                    live.update(entropy)
        except Exception as e:  # noqa: BLE001
            self.on_error("attention probe", e)
        try:
            if self.sample_every and step % self.sample_every == 0 and tokenizer is not None:
                stats, rows = generate_samples(model, tokenizer, self.sample_tokens, synced=together)
                if main:
                    live.update(stats)
                    self.samples = [[step, *r] for r in rows]
        except Exception as e:  # noqa: BLE001
            self.on_error("sample probe", e)
