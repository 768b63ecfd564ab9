"""Trains the test model (model.py) on the generated text of data.py and
writes its weights (fp16, the FIDW format of model.py), the training log
and an evaluation on held-out text (a different seed of the generator).

  python3 train.py --out DIR [--minutes M] [--steps N] [--batch B]
                   [--seq T] [--seed S] [--docs ROOT]

Runs on a GPU with torch 2.x (bf16 autocast, fused attention) or, slowly,
on a CPU (a smoke test: --steps 3 --batch 2 --seq 256). The learning rate
follows a cosine from the planned progress, the larger of step / --steps
and elapsed / --minutes, so a time-bounded run still ends its schedule.
"""

import argparse
import hashlib
import json
import math
import os
import sys
import time
from multiprocessing import Pool

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
import model as M  # noqa: E402

CHUNK = 1 << 18  # tokens per generated chunk


def _gen(args):
    seed, i, docs = args
    return data.chunk(seed, i, CHUNK, docs)


def pool_tokens(seed, n_tokens, docs, workers):
    """The generator's token stream for seed, at least n_tokens long, as a
    tensor (the same for any number of workers)."""
    n = (n_tokens + CHUNK - 1) // CHUNK
    jobs = [(seed, i, docs) for i in range(n)]
    if workers > 1:
        with Pool(workers) as p:
            parts = p.map(_gen, jobs)
    else:
        parts = [_gen(j) for j in jobs]
    flat = [t for part in parts for t in part]
    return torch.tensor(flat, dtype=torch.int16)


def evaluate(model, toks, seq, n_seqs, device):
    """Mean loss, entropy and top-1 probability over n_seqs windows of
    seq tokens taken evenly from toks (positions 0..seq-1 predicted)."""
    model.eval()
    loss = ent = top1 = 0.0
    count = 0
    step = (len(toks) - seq - 1) // n_seqs
    with torch.no_grad():
        for i in range(n_seqs):
            w = toks[i * step:i * step + seq + 1].long().to(device)
            if device == "cpu":
                logits, _ = model(w[None, :-1])
            else:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    logits, _, _ = model.train_forward(w[None, :-1])
            lp = torch.log_softmax(logits.float(), -1)[0]
            p = lp.exp()
            loss += F.nll_loss(lp, w[1:], reduction="sum").item()
            ent += -(p * lp).sum(-1).sum().item()
            top1 += p.max(-1).values.sum().item()
            count += seq
    model.train()
    return {"loss": loss / count, "entropy": ent / count,
            "top1_prob": top1 / count, "tokens": count}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=6.0)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pool", type=int, default=48 << 20,
                    help="tokens of training text generated")
    ap.add_argument("--docs", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--idx-rows", type=int, default=64)
    ap.add_argument("--save-every", type=int, default=500)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    logf = open(os.path.join(a.out, "train.log"), "w")

    def log(*x):
        s = " ".join(str(v) for v in x)
        print(s, flush=True)
        logf.write(s + "\n")
        logf.flush()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    log("command:", " ".join(sys.argv))
    log("torch", torch.__version__, "device", device,
        torch.cuda.get_device_name(0) if device == "cuda" else "")
    t0 = time.time()
    docs = data.load_docs(a.docs)
    h = hashlib.sha256("\0".join(docs).encode()).hexdigest()[:16]
    log("documents: %d files, %d chars, sha256 %s" %
        (len(docs), sum(len(d) for d in docs), h))
    train = pool_tokens(a.seed, a.pool, docs, a.workers)
    held = pool_tokens(a.seed + 1000, 1 << 20, docs, a.workers)
    log("text: %d training tokens, %d held-out tokens, generated in %.1fs" %
        (len(train), len(held), time.time() - t0))

    torch.manual_seed(a.seed)
    model = M.Model().to(device)
    nparams = sum(p.numel() for p in model.parameters())
    log("model:", json.dumps(model.cfg, sort_keys=True))
    log("parameters:", nparams)
    decay, no_decay = [], []
    for n_, p in model.named_parameters():
        (decay if p.dim() >= 2 else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95))
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    gen = torch.Generator().manual_seed(a.seed)
    warm = 100
    start = time.time()
    step = 0
    ema = None
    while True:
        progress = max(step / a.steps, (time.time() - start) / (60 * a.minutes))
        if progress >= 1.0:
            break
        lr = a.lr * min(1.0, (step + 1) / warm) * \
            (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))
        for g in opt.param_groups:
            g["lr"] = lr
        offs = torch.randint(0, len(train) - a.seq - 1, (a.batch,),
                             generator=gen)
        batch = torch.stack([train[o:o + a.seq + 1] for o in offs.tolist()])
        batch = batch.long().to(device)
        if device == "cuda":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits, bal, il = model.train_forward(
                    batch[:, :-1], a.idx_rows, gen)
        else:
            logits, bal, il = model.train_forward(batch[:, :-1], a.idx_rows,
                                                  gen)
        ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                             batch[:, 1:].reshape(-1))
        loss = ce + 0.01 * bal + (il if il is not None else 0.0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 25 == 0 or step == 1:
            c = ce.item()
            ema = c if ema is None else 0.9 * ema + 0.1 * c
            el = time.time() - start
            log("step %5d  ce %.4f (ema %.4f)  balance %.3f  indexer-kl %.4f"
                "  gnorm %.2f  lr %.2e  %.0f tok/s  %.0fs" %
                (step, c, ema, bal.item(), il.item() if il is not None
                 else 0.0, gn.item(), lr, step * a.batch * a.seq / el, el))
        if step % a.save_every == 0:
            M.save_weights(model, os.path.join(a.out, "weights.bin"),
                           {"step": step})
    el = time.time() - start
    log("trained %d steps (%d tokens) in %.1fs" %
        (step, step * a.batch * a.seq, el))
    meta = {"steps": step, "tokens": step * a.batch * a.seq,
            "seconds": round(el, 1), "seed": a.seed, "docs_sha256": h,
            "command": " ".join(sys.argv)}
    M.save_weights(model, os.path.join(a.out, "weights.bin"), meta)
    ev = evaluate(model, held, min(a.seq, 2048), 16, device)
    log("held-out (%s): loss %.4f nats/token, "
        "mean entropy %.4f, mean top-1 probability %.4f over %d tokens" %
        ("bf16 autocast, " + device if device == "cuda" else "fp32, cpu",
         ev["loss"], ev["entropy"], ev["top1_prob"], ev["tokens"]))
    with open(os.path.join(a.out, "eval.json"), "w") as f:
        json.dump({"train": meta, "held_out_device": ev}, f, indent=1)
    log("done in %.1fs" % (time.time() - t0))


if __name__ == "__main__":
    main()
