"""A small real transformer for fidelity's tests: byte-level tokenizer, chat
template, model and the numerics switches that play a deployment's patches.

Architecture (every piece one of the motivating patches touches):
  - byte-level vocabulary: ids 0-255 are bytes, 256-264 the chat specials
    (the same names and order as fidelity sim's), 265-271 reserved;
  - hyper-connection residual: N_STREAMS residual streams, mixed around
    every sublayer by small matrices computed from the streams (pre, post
    and a Sinkhorn-projected doubly stochastic residual matrix, as in
    manifold-constrained hyper-connections); the reference computes them in
    fp32;
  - attention with RoPE and its own decode path over a KV cache (one query
    against the cached keys), plus a sparse top-k indexer (a lightning
    indexer: a few low-dimensional ReLU heads score every key; with the
    switch on, attention keeps the top k key positions per query and is
    exactly the dense computation when a query sees k positions or fewer);
  - a mixture-of-experts FFN: one shared SwiGLU expert plus routed SwiGLU
    experts (softmax router, top-2, renormalised gates) scaled by a
    routed-scaling factor.

Every experts' output is computed for every token (weights zero where not
routed) so that a row's result never depends on what other rows hold: with
a fixed thread count the same tokens give bit-identical logits, and a
switch that changes only some positions leaves the others bit-identical.

torch 1.13 (Debian 12's python3-torch, CPU) and torch 2.x (training on a
GPU) both run this file. torch 1.13 has no fp8 dtype: fp8 e4m3 rounding is
emulated (fp8_e4m3 below); bf16 rounding uses torch's bfloat16 cast.
"""

import array
import json
import math
import re
import struct
import sys

import torch
import torch.nn.functional as F

# ---- tokenizer and chat template ----

SPECIALS = ["<|bos|>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>",
            "<|end|>", "<think>", "</think>", "<|tool_call|>"]
BOS, SYSTEM, USER, ASSISTANT, TOOL, END, THINK, THINK_END, TOOL_CALL = \
    range(256, 265)
VOCAB = 272
ROLES = {"system": SYSTEM, "developer": SYSTEM, "user": USER,
         "assistant": ASSISTANT, "tool": TOOL}
_SPECIAL_RE = re.compile("(" + "|".join(re.escape(s) for s in SPECIALS) + ")")
_SPECIAL_ID = {s: 256 + i for i, s in enumerate(SPECIALS)}


def encode(text):
    """Token ids of text: the special strings as their ids, every other
    byte of the UTF-8 encoding as itself."""
    out = []
    for part in _SPECIAL_RE.split(text):
        if not part:
            continue
        sid = _SPECIAL_ID.get(part)
        if sid is not None:
            out.append(sid)
        else:
            out.extend(part.encode("utf-8", "surrogatepass"))
    return out


def decode_bytes(ids):
    b = bytearray()
    for t in ids:
        if t < 256:
            b.append(t)
        elif t < 256 + len(SPECIALS):
            b.extend(SPECIALS[t - 256].encode())
    return bytes(b)


def decode(ids):
    return decode_bytes(ids).decode("utf-8", "replace")


def token_text(t):
    """One token's own text (a lone byte of a multi-byte character is
    U+FFFD, as vLLM decodes a single token)."""
    return decode([t])


def _content_text(content, i):
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ValueError("messages[%d].content must be a string, null or an "
                         "array of content parts" % i)
    s = []
    for k, part in enumerate(content):
        if not isinstance(part, dict):
            raise ValueError("messages[%d].content[%d] must be an object"
                             % (i, k))
        t = part.get("text")
        if t is not None and not isinstance(t, str):
            raise ValueError("messages[%d].content[%d].text must be a string"
                             % (i, k))
        if t:
            s.append(t)
    return "".join(s)


def render(messages, add_generation_prompt=True):
    """The chat template of fidelity sim (docs/SIM.md), over this
    tokenizer: <|bos|>, then per message <|ROLE|>[<think>R</think>]CONTENT
    [<|tool_call|>{"arguments":A,"name":N}]<|end|>\\n, then <|assistant|>
    when a generation prompt is asked for."""
    if not isinstance(messages, list):
        raise ValueError("'messages' must be an array")
    if not messages:
        raise ValueError("'messages' must not be empty")
    out = [BOS]
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ValueError("messages[%d] must be an object" % i)
        role = m.get("role")
        if not isinstance(role, str):
            raise ValueError("messages[%d].role must be a string" % i)
        if role not in ROLES:
            raise ValueError("messages[%d].role '%s' is not one of system, "
                             "developer, user, assistant, tool" % (i, role))
        rid = ROLES[role]
        text = _content_text(m.get("content"), i)
        out.append(rid)
        if rid == ASSISTANT:
            r = m.get("reasoning_content") or m.get("reasoning")
            if isinstance(r, str) and r:
                out.append(THINK)
                out.extend(encode(r))
                out.append(THINK_END)
        out.extend(encode(text))
        if rid == ASSISTANT and isinstance(m.get("tool_calls"), list):
            for call in m["tool_calls"]:
                fn = (call or {}).get("function") or {}
                o = {"name": fn.get("name", ""),
                     "arguments": fn.get("arguments", "")}
                out.append(TOOL_CALL)
                out.extend(encode(json.dumps(o, separators=(",", ":"),
                                             sort_keys=True,
                                             ensure_ascii=False)))
        out.append(END)
        out.append(ord("\n"))
    if add_generation_prompt:
        out.append(ASSISTANT)
    return out


# ---- numerics helpers ----

def bf16(x):
    """x rounded to bfloat16 (round to nearest even), kept as float32."""
    return x.to(torch.bfloat16).to(torch.float32)


def fp8_e4m3(x):
    """x rounded to fp8 e4m3 (OCP 'fn': 3 mantissa bits, exponent bias 7,
    normals from 2^-6, subnormals down to 2^-9, largest finite 448,
    saturating), without any scale, kept as float32. torch 1.13 has no
    float8 dtype, so the rounding is done by hand: the quantum at x is
    2^(floor(log2|x|) - 3) (2^-9 below the normal range), and
    round-half-even on x / quantum."""
    a = x.abs().clamp(max=448.0)
    e = torch.floor(torch.log2(a.clamp(min=2.0 ** -6)))
    q = torch.pow(2.0, e - 3)
    r = torch.round(a / q) * q
    return torch.where(x < 0, -r, r).clamp(-448.0, 448.0)


def rms(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


# ---- configuration and switches ----

DEFAULT_CFG = dict(vocab=VOCAB, d=256, layers=4, heads=4, head_dim=64,
                   streams=4, experts=4, experts_per_tok=2, expert_ff=128,
                   shared_ff=256, routed_scaling=2.5, idx_heads=2, idx_dim=32,
                   max_pos=4096, rope_theta=10000.0, sinkhorn_iters=10)


class Switches:
    """The numerics a request runs with. Defaults are the reference.

    mix_bf16      hyper-connection mixing (the coefficient GEMM and the
                  application of pre/res to the streams) in bf16 instead of
                  fp32, on every path (prefill and decode)
    splitk        decode attention split over the keys in chunks of this
                  many positions, each chunk's partial output and
                  denominator held in bf16, combined after (0: off); the
                  decode path only
    indexer_topk  sparse attention keeping each query's top k key positions
                  by the indexer's score (0: dense); exactly dense for a
                  query that sees k positions or fewer
    routed_scaling  the MoE routed-scaling factor (None: the trained one)
    """

    def __init__(self, mix_bf16=False, splitk=0, indexer_topk=0,
                 routed_scaling=None):
        self.mix_bf16 = mix_bf16
        self.splitk = splitk
        self.indexer_topk = indexer_topk
        self.routed_scaling = routed_scaling

    def copy(self, **kw):
        s = Switches(self.mix_bf16, self.splitk, self.indexer_topk,
                     self.routed_scaling)
        for k, v in kw.items():
            setattr(s, k, v)
        return s


REF = Switches()


# ---- the model ----

class Model(torch.nn.Module):
    def __init__(self, cfg=None):
        super().__init__()
        c = dict(DEFAULT_CFG)
        c.update(cfg or {})
        self.cfg = c
        d, n, L = c["d"], c["streams"], c["layers"]
        E, f, fs = c["experts"], c["expert_ff"], c["shared_ff"]
        hi, di = c["idx_heads"], c["idx_dim"]
        P = torch.nn.Parameter

        def lin(i, o, scale=1.0):
            return P(torch.randn(i, o) * (scale / math.sqrt(i)))

        self.embed = P(torch.randn(c["vocab"], d) * 0.5)
        self.final_norm = P(torch.ones(d))
        self.lm_head = lin(d, c["vocab"])
        nc = 2 * n + n * n
        hc_bias = torch.zeros(nc)
        hc_bias[2 * n:] = (torch.eye(n) * 4.0).flatten()
        self.blocks = torch.nn.ModuleList()
        for _ in range(L):
            b = torch.nn.Module()
            for tag in ("a", "f"):
                setattr(b, "hc_%s_norm" % tag, P(torch.ones(n * d)))
                setattr(b, "hc_%s_w" % tag, lin(n * d, nc, 0.1))
                setattr(b, "hc_%s_b" % tag, P(hc_bias.clone()))
                setattr(b, "hc_%s_alpha" % tag, P(torch.full((3,), 0.1)))
            b.attn_norm = P(torch.ones(d))
            b.wq = lin(d, d)
            b.wk = lin(d, d)
            b.wv = lin(d, d)
            b.wo = lin(d, d, 0.5 / math.sqrt(2 * L))
            b.idx_q = lin(d, hi * di)
            b.idx_k = lin(d, di)
            b.idx_w = lin(d, hi)
            b.ffn_norm = P(torch.ones(d))
            b.router = lin(d, E, 0.1)
            b.w1 = P(torch.randn(E, d, f) / math.sqrt(d))
            b.w3 = P(torch.randn(E, d, f) / math.sqrt(d))
            b.w2 = P(torch.randn(E, f, d) * (0.5 / math.sqrt(f * 2 * L)))
            b.s1 = lin(d, fs)
            b.s3 = lin(d, fs)
            b.s2 = lin(fs, d, 0.5 / math.sqrt(2 * L))
            self.blocks.append(b)
        hd = c["head_dim"]
        inv = 1.0 / (c["rope_theta"] ** (
            torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        ang = torch.arange(c["max_pos"], dtype=torch.float64)[:, None] * inv
        self.register_buffer("rope_cos", torch.cos(ang).float(),
                             persistent=False)
        self.register_buffer("rope_sin", torch.sin(ang).float(),
                             persistent=False)

    # -- pieces --

    def _rope(self, x, pos):
        """x (B, h, T, hd) rotated to positions pos (T,) (rotate-half)."""
        cos = self.rope_cos[pos].to(x.dtype)
        sin = self.rope_sin[pos].to(x.dtype)
        h = x.shape[-1] // 2
        x1, x2 = x[..., :h], x[..., h:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

    def _hc(self, b, tag, H, sw):
        """Hyper-connection coefficients of one sublayer from the streams H
        (B, T, n, d): pre (B,T,n), post (B,T,n), res (B,T,n,n)."""
        c = self.cfg
        n = c["streams"]
        B, T = H.shape[0], H.shape[1]
        x = rms(H.reshape(B, T, n * c["d"]).float(),
                getattr(b, "hc_%s_norm" % tag))
        w = getattr(b, "hc_%s_w" % tag)
        if sw.mix_bf16:
            z = bf16(bf16(x) @ bf16(w.float()))
        else:
            z = (x @ w).float()
        a = getattr(b, "hc_%s_alpha" % tag).float()
        bias = getattr(b, "hc_%s_b" % tag).float()
        pre = torch.sigmoid(a[0] * z[..., :n] + bias[:n])
        post = 2.0 * torch.sigmoid(a[1] * z[..., n:2 * n] + bias[n:2 * n])
        r = (a[2] * z[..., 2 * n:] + bias[2 * n:]).reshape(B, T, n, n)
        m = torch.exp(r - r.amax((-1, -2), keepdim=True))
        for _ in range(c["sinkhorn_iters"]):
            m = m / m.sum(-1, keepdim=True)
            m = m / m.sum(-2, keepdim=True)
        return pre, post, m

    @staticmethod
    def _mix_in(pre, H, sw):
        """The sublayer's input: sum_i pre_i H_i, (B, T, d), accumulated
        in stream order (fp32; with mix_bf16, of bf16-rounded operands,
        rounded to bf16 after, as a bf16 GEMM does)."""
        if sw.mix_bf16:
            pre, H = bf16(pre), bf16(H)
        pre = pre.to(H.dtype)
        acc = pre[..., 0:1] * H[..., 0, :]
        for j in range(1, H.shape[-2]):
            acc = acc + pre[..., j:j + 1] * H[..., j, :]
        return bf16(acc) if sw.mix_bf16 else acc

    @staticmethod
    def _mix_out(res, post, H, y, sw):
        """The streams after the sublayer: res H + post (x) y (res H as
        _mix_in accumulates)."""
        Hm = H
        if sw.mix_bf16:
            res, Hm = bf16(res), bf16(H)
        res = res.to(H.dtype)
        acc = res[..., :, 0:1] * Hm[..., 0:1, :]
        for j in range(1, H.shape[-2]):
            acc = acc + res[..., :, j:j + 1] * Hm[..., j:j + 1, :]
        if sw.mix_bf16:
            acc = bf16(acc)
        return acc + post.unsqueeze(-1).to(H.dtype) * y.unsqueeze(-2)

    def _index(self, b, x, ki):
        """Indexer scores (B, T, S) of queries x (B, T, d) against the
        indexer keys ki (B, S, di): sum over heads of w_h relu(q_h . k)."""
        c = self.cfg
        B, T = x.shape[0], x.shape[1]
        qi = (x @ b.idx_q).reshape(B, T, c["idx_heads"], c["idx_dim"])
        w = x @ b.idx_w  # (B, T, hi)
        s = torch.relu(torch.matmul(qi, ki.transpose(1, 2).unsqueeze(1)))
        return (s * w.unsqueeze(-1)).sum(2) / math.sqrt(c["idx_dim"])

    def _attn(self, b, x, pos, past, sw, decode):
        """Attention of x (B, T, d) (normalised) at positions pos; past is
        None or (K, V, KI) of the earlier positions. Returns the output
        and the new (K, V, KI)."""
        c = self.cfg
        B, T = x.shape[0], x.shape[1]
        h, hd = c["heads"], c["head_dim"]
        q = (x @ b.wq).reshape(B, T, h, hd).transpose(1, 2)
        k = (x @ b.wk).reshape(B, T, h, hd).transpose(1, 2)
        v = (x @ b.wv).reshape(B, T, h, hd).transpose(1, 2)
        q = self._rope(q, pos)
        k = self._rope(k, pos)
        ki = x @ b.idx_k
        if past is not None:
            k = torch.cat([past[0], k], 2)
            v = torch.cat([past[1], v], 2)
            ki = torch.cat([past[2], ki], 1)
        S = k.shape[2]
        Lp = S - T
        scores = torch.matmul(q, k.transpose(2, 3)) * (1.0 / math.sqrt(hd))
        tq = torch.arange(T).unsqueeze(1) + Lp
        allowed = torch.arange(S).unsqueeze(0) <= tq  # (T, S)
        kk = sw.indexer_topk
        if kk and S > kk:
            allowed = allowed.unsqueeze(0).expand(B, T, S)
            I = self._index(b, x, ki).masked_fill(~allowed, float("-inf"))
            top = I.topk(kk, dim=-1).indices
            sel = torch.zeros(B, T, S, dtype=torch.bool)
            sel.scatter_(2, top, True)
            allowed = (sel & allowed).unsqueeze(1)
        # 0 where allowed, -inf elsewhere: adding it leaves allowed scores
        # exactly as they are
        bias = torch.zeros(allowed.shape).masked_fill_(~allowed,
                                                       float("-inf"))
        scores = scores + bias
        if decode and T == 1 and sw.splitk:
            o = self._splitk(scores, v, sw.splitk)
        else:
            o = torch.matmul(torch.softmax(scores, -1), v)
        o = o.transpose(1, 2).reshape(B, T, h * hd) @ b.wo
        return o, (k, v, ki)

    @staticmethod
    def _splitk(scores, v, S):
        """Decode attention split over the keys: per chunk of S keys a
        partial softmax numerator/denominator held in bf16, combined by
        their maxima (flash-decoding's reduction, lower precision)."""
        ms, ls, os_ = [], [], []
        n = scores.shape[-1]
        for c0 in range(0, n, S):
            sc = scores[..., c0:c0 + S]
            m = sc.amax(-1, keepdim=True)
            m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
            p = torch.exp(sc - m)
            ls.append(bf16(p.sum(-1, keepdim=True)))
            os_.append(bf16(torch.matmul(p, v[..., c0:c0 + S, :])))
            ms.append(m)
        M = torch.stack(ms).amax(0)
        num = torch.zeros_like(os_[0])
        den = torch.zeros_like(ls[0])
        for m, l, o in zip(ms, ls, os_):
            e = torch.exp(m - M)
            num = num + e * o
            den = den + e * l
        return num / den

    def _moe(self, b, x, sw, aux=None):
        """Shared expert plus routed experts (top-k of a softmax router,
        gates renormalised) times the routed-scaling factor."""
        c = self.cfg
        E, K = c["experts"], c["experts_per_tok"]
        rsf = c["routed_scaling"] if sw.routed_scaling is None \
            else sw.routed_scaling
        logits = (x @ b.router).float()
        pr = torch.softmax(logits, -1)
        top = pr.topk(K, dim=-1)
        gv = top.values / top.values.sum(-1, keepdim=True)
        g = torch.zeros_like(pr).scatter(-1, top.indices, gv)
        f = c["expert_ff"]
        # every expert on every token: one GEMM for all experts' up
        # projections, one per expert down (shapes never depend on routing)
        w1, w3 = getattr(b, "_w13", (None, None))
        if w1 is None or self.training:
            w1 = b.w1.permute(1, 0, 2).reshape(c["d"], E * f)
            w3 = b.w3.permute(1, 0, 2).reshape(c["d"], E * f)
        a = F.silu(x @ w1) * (x @ w3)  # (B, T, E*f)
        g = g.to(x.dtype)
        routed = None
        for j in range(E):
            eo = a[..., j * f:(j + 1) * f] @ b.w2[j]
            t = g[..., j:j + 1] * eo
            routed = t if routed is None else routed + t
        shared = (F.silu(x @ b.s1) * (x @ b.s3)) @ b.s2
        if aux is not None:
            frac = torch.zeros_like(pr).scatter(-1, top.indices, 1.0)
            f_e = frac.reshape(-1, E).mean(0) / K
            p_e = pr.reshape(-1, E).mean(0)
            aux.append(E * (f_e * p_e).sum())
        return shared + rsf * routed

    # -- the forward pass --

    def forward(self, tokens, past=None, pos0=0, sw=REF, decode=False,
                pos_shift=0, want=None):
        """Logits (B, T, V) of tokens (B, T) placed at positions pos0..
        (minus pos_shift, a position fault), after the earlier positions
        whose per-layer (K, V, KI) are in past (None: none). Returns
        (logits, new_past). decode selects the decode attention kernel for
        a one-token step. want: positions (indices into T) whose logits
        are needed (None: all)."""
        c = self.cfg
        B, T = tokens.shape
        pos = torch.arange(pos0, pos0 + T) - pos_shift
        pos = pos.clamp(min=0)
        e = self.embed[tokens]
        H = e.unsqueeze(2).expand(B, T, c["streams"], c["d"]).contiguous()
        new = []
        for li, b in enumerate(self.blocks):
            pre, post, res = self._hc(b, "a", H, sw)
            u = self._mix_in(pre, H, sw)
            y, kv = self._attn(b, rms(u, b.attn_norm), pos,
                               None if past is None else past[li], sw, decode)
            new.append(kv)
            H = self._mix_out(res, post, H, y, sw)
            pre, post, res = self._hc(b, "f", H, sw)
            u = self._mix_in(pre, H, sw)
            y = self._moe(b, rms(u, b.ffn_norm), sw)
            H = self._mix_out(res, post, H, y, sw)
        hsum = H.sum(2)
        if want is not None:
            hsum = hsum[:, want]
        logits = rms(hsum, self.final_norm) @ self.lm_head
        return logits.float(), new

    # -- training --

    def train_forward(self, tokens, idx_rows=0, gen=None):
        """Training: logits (B, T, V), the MoE balance loss and the
        indexer's distillation loss (KL from the head-averaged attention
        distribution of idx_rows sampled query rows to the indexer's
        softmax; the indexer's inputs are detached so it does not move
        the model)."""
        c = self.cfg
        B, T = tokens.shape
        pos = torch.arange(T, device=tokens.device)
        e = self.embed[tokens]
        H = e.unsqueeze(2).expand(B, T, c["streams"], c["d"]).contiguous()
        aux, idx_losses = [], []
        h, hd = c["heads"], c["head_dim"]
        rows = None
        if idx_rows:
            rows = torch.randint(T // 8, T, (idx_rows,), generator=gen,
                                 device="cpu").to(tokens.device)
        for b in self.blocks:
            pre, post, res = self._hc(b, "a", H, REF)
            u = self._mix_in(pre, H, REF)
            x = rms(u, b.attn_norm)
            q = (x @ b.wq).reshape(B, T, h, hd).transpose(1, 2)
            k = (x @ b.wk).reshape(B, T, h, hd).transpose(1, 2)
            v = (x @ b.wv).reshape(B, T, h, hd).transpose(1, 2)
            q = self._rope(q, pos)
            k = self._rope(k, pos)
            if hasattr(F, "scaled_dot_product_attention"):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:  # torch 1.13 (a CPU smoke test)
                sc = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(hd)
                cm = torch.ones(T, T, dtype=torch.bool,
                                device=sc.device).tril()
                o = torch.matmul(torch.softmax(
                    sc.masked_fill(~cm, float("-inf")), -1), v)
            y = o.transpose(1, 2).reshape(B, T, h * hd) @ b.wo
            if rows is not None:
                with torch.no_grad():
                    qs = q[:, :, rows]  # (B, h, R, hd)
                    sc = torch.matmul(qs, k.transpose(2, 3)).float() \
                        / math.sqrt(hd)
                    ok = torch.arange(T, device=sc.device)[None, :] <= \
                        rows[:, None]
                    sc = sc.masked_fill(~ok, float("-inf"))
                    target = torch.softmax(sc, -1).mean(1)  # (B, R, T)
                xd = x.detach()
                ki = xd @ b.idx_k
                I = self._index(b, xd[:, rows], ki).float()
                I = I.masked_fill(~ok, float("-inf"))
                lq = torch.log_softmax(I, -1)
                lt = torch.log(target.clamp(min=1e-30))
                kl = (target * (lt - lq)).masked_fill(~ok, 0.0).sum(-1)
                idx_losses.append(kl.mean())
            H = self._mix_out(res, post, H, y, REF)
            pre, post, res = self._hc(b, "f", H, REF)
            u = self._mix_in(pre, H, REF)
            y = self._moe(b, rms(u, b.ffn_norm), REF, aux)
            H = self._mix_out(res, post, H, y, REF)
        logits = rms(H.sum(2), self.final_norm) @ self.lm_head
        bal = sum(aux) / len(aux)
        il = sum(idx_losses) / len(idx_losses) if idx_losses else None
        return logits, bal, il


# ---- weights file ----
#
# "FIDW" magic, a little-endian uint32 header length, the header (JSON:
# {"config": {...}, "tensors": [{"name", "shape", "offset", "dtype"}]}),
# then each tensor's raw little-endian fp16 data at its offset (from the
# end of the header). Written and read by this code alone, so any torch
# loads it (torch.save's format moved between 1.13 and 2.x).

MAGIC = b"FIDW"


def save_weights(model, path, meta=None):
    sd = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    hdr = {"config": model.cfg, "meta": meta or {}, "tensors": []}
    blobs, off = [], 0
    for name in sorted(sd):
        t = sd[name].to(torch.float16).contiguous()
        a = array.array("h", t.flatten().view(torch.int16).tolist())
        if sys.byteorder != "little":
            a.byteswap()
        raw = a.tobytes()
        hdr["tensors"].append({"name": name, "shape": list(t.shape),
                               "offset": off, "dtype": "f16"})
        blobs.append(raw)
        off += len(raw)
    hj = json.dumps(hdr, sort_keys=True).encode()
    with open(path, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<I", len(hj)))
        f.write(hj)
        for raw in blobs:
            f.write(raw)


def load_weights(path):
    """The model of a weights file, in float32, in eval mode."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != MAGIC:
        raise ValueError("%s is not a weights file (no FIDW magic)" % path)
    (hl,) = struct.unpack("<I", data[4:8])
    hdr = json.loads(data[8:8 + hl].decode())
    base = 8 + hl
    model = Model(hdr["config"])
    sd = {}
    for t in hdr["tensors"]:
        n = 1
        for s in t["shape"]:
            n *= s
        a = array.array("h", data[base + t["offset"]:
                                  base + t["offset"] + 2 * n])
        if sys.byteorder != "little":
            a.byteswap()
        a = torch.tensor(a, dtype=torch.int16).view(torch.float16)
        sd[t["name"]] = a.reshape(t["shape"]).float()
    model.load_state_dict(sd)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    c = model.cfg
    for b in model.blocks:  # the experts' up projections side by side
        E, f = c["experts"], c["expert_ff"]
        b._w13 = (b.w1.permute(1, 0, 2).reshape(c["d"], E * f).contiguous(),
                  b.w3.permute(1, 0, 2).reshape(c["d"], E * f).contiguous())
    return model, hdr
