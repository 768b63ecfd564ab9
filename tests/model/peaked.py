"""How peaked the test model's next-token distributions are, on the CPU in
fp32 (the reference numerics the server runs): mean loss, entropy and
top-1 probability over held-out generated text (data.py with a seed the
training never used), and how often a greedy answer recalls a fact stated
earlier in a probe-style conversation.

  python3 tests/model/peaked.py [--windows N] [--length T] [--recall N]
"""

import argparse
import os
import random
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, HERE)
import data  # noqa: E402
import model as M  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", default=os.path.join(HERE, "weights.bin"))
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--length", type=int, default=1024)
    ap.add_argument("--recall", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1001)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.set_grad_enabled(False)
    m, hdr = M.load_weights(a.weights)
    docs = data.load_docs(os.path.join(HERE, "..", ".."))
    held = data.chunk(a.seed, 0, a.windows * (a.length + 1) * 4, docs)
    n = loss = ent = top1 = 0.0
    t0 = time.time()
    step = len(held) // a.windows
    for i in range(a.windows):
        w = torch.tensor(held[i * step:i * step + a.length + 1])[None]
        lp = torch.log_softmax(m(w[:, :-1])[0][0], -1)
        p = lp.exp()
        loss += -lp.gather(1, w[0, 1:, None]).sum().item()
        ent += -(p * lp).sum().item()
        top1 += p.max(-1).values.sum().item()
        n += a.length
    print("held-out text (seed %d, %d windows of %d tokens, fp32 CPU, "
          "%.1fs): loss %.4f nats/token, mean entropy %.4f nats, mean top-1 "
          "probability %.4f" % (a.seed, a.windows, a.length,
                                time.time() - t0, loss / n, ent / n,
                                top1 / n))
    r = random.Random(a.seed)
    ok = 0
    for _ in range(a.recall):
        msgs = data.conv_probe(r, 600)
        ids = M.render(msgs[:-1])
        want = msgs[-1]["content"]
        lg, past = m(torch.tensor(ids)[None])
        out = []
        t = int(lg[0, -1].argmax())
        while t != M.END and len(out) < 80:
            out.append(t)
            lg, past = m(torch.tensor([[t]]), past=past,
                         pos0=len(ids) + len(out) - 1, decode=True)
            t = int(lg[0, -1].argmax())
        ok += M.decode(out) == want
    print("recall: %d of %d greedy answers state the fact as given" %
          (ok, a.recall))


if __name__ == "__main__":
    main()
