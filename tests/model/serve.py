#!/usr/bin/env python3
"""The test model (model.py) behind the HTTP dialects fidelity speaks:
OpenAI chat and completions (logprobs, vLLM's prompt_logprobs and
return_tokens_as_token_ids, token-id prompts), vLLM's /tokenize and
/detokenize, sglang's /generate (return_logprob, logprob_start_len,
top_logprobs_num, token_ids_logprob) and TGI's, /v1/models, /health,
/version, sglang's /get_server_info with the switches, a block-granular
prefix cache (cached_tokens reported) and the flush endpoints of sglang
(/flush_cache) and vLLM (/reset_prefix_cache). Where fidelity sim serves
the same endpoint this server answers as the sim does (docs/SIM.md).

  python3 serve.py [--host 127.0.0.1] [--port 0] [--port-file FILE]
                   [switches]

On start it prints one line, "fidelity model: listening on
http://HOST:PORT" (port 0 picks a free one), and with --port-file writes
the port there. Requests are served one at a time (a lock around the
model), single-threaded by default, so the same request gives
bit-identical answers.

Switches (flags, or the environment variables named; a flag wins), the
patches they play and the path each really touches:

  --mix-bf16             FIDELITY_MODEL_MIX_BF16=1
      hyper-connection mixing in bf16 instead of fp32: prefill and decode
  --splitk N             FIDELITY_MODEL_SPLITK=N
      split-K decode attention (chunks of N keys, bf16 partials): the
      decode steps only; prefill (prompt logprobs, the first generated
      token) is untouched
  --indexer-topk K       FIDELITY_MODEL_INDEXER_TOPK=K
      sparse attention over each query's top K keys by the indexer: both
      paths, exactly dense where a query sees K positions or fewer
  --routed-scaling F     FIDELITY_MODEL_ROUTED_SCALING=F
      the MoE routed-scaling factor (trained: 2.5): both paths, every
      position
  --inert                FIDELITY_MODEL_INERT=1
      runs the forward under torch.inference_mode instead of no_grad:
      another code path, bit-identical results
  --cache-kv-dtype bf16|fp8   FIDELITY_MODEL_CACHE_KV_DTYPE
      the K/V the prefix cache holds rounded to bf16, or to fp8 e4m3 with
      no scale: only requests served partly from the cache (warm)
  --cache-pos-offset     FIDELITY_MODEL_CACHE_POS_OFFSET=1
      after a cache hit the tokens computed after the cached prefix (and
      generated ones) are placed one block early (RoPE positions minus the
      block size): warm requests only
  --recompute-differs    FIDELITY_MODEL_RECOMPUTE_DIFFERS=1
      a prefix that was cached, evicted and is recomputed is computed
      with bf16 mixing: only requests whose prefix was evicted
"""

import argparse
import collections
import hashlib
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as M  # noqa: E402

VERSION = "fidelity-model 1"
GHOSTS = 4096  # evicted block keys remembered


class BadRequest(Exception):
    def __init__(self, msg, param=None, status=400):
        super().__init__(msg)
        self.param = param
        self.status = status


# ---- prefix cache ----

class PrefixCache:
    """Blocks of `block` tokens named by a hash of every token from the
    start of the sequence to the block's end, holding each layer's K, V
    and indexer keys for those positions; least recently used first out.
    Keys of evicted blocks are remembered (GHOSTS of them) so that a
    recomputation can be told apart."""

    def __init__(self, tokens, block, kv_dtype):
        self.block = block
        self.cap = tokens // block if tokens >= block else 0
        self.kv_dtype = kv_dtype
        self.blocks = collections.OrderedDict()
        self.ghosts = collections.OrderedDict()
        self.flushes = 0

    def keys(self, toks, n):
        h = b"fidelity-model"
        out = []
        for at in range(0, n - self.block + 1, self.block):
            blk = toks[at:at + self.block]
            h = hashlib.blake2b(h + b"".join(t.to_bytes(2, "little")
                                             for t in blk),
                                digest_size=16).digest()
            out.append(h)
        return out

    def lookup(self, toks, limit):
        """(cached, recomputed, past): the longest run of leading blocks
        held, never the last token, at most limit tokens; recomputed is
        the run of evicted blocks after it; past is None or each layer's
        (K, V, KI) of the cached positions."""
        if not self.cap or len(toks) < 2:
            return 0, 0, None
        mx = min(len(toks) - 1, limit)
        keys = self.keys(toks, mx)
        hit = []
        for k in keys:
            if k not in self.blocks:
                break
            self.blocks.move_to_end(k)
            hit.append(self.blocks[k])
        cached = len(hit) * self.block
        rec = 0
        for k in keys[len(hit):]:
            if k not in self.ghosts:
                break
            rec += self.block
        if not hit:
            return 0, rec, None
        past = []
        for li in range(len(hit[0])):
            past.append(tuple(torch.cat([b[li][j] for b in hit],
                                        2 if j < 2 else 1)
                              for j in range(3)))
        return cached, rec, past

    def _held(self, x):
        if self.kv_dtype == "bf16":
            return M.bf16(x)
        if self.kv_dtype == "fp8":
            return M.fp8_e4m3(x)
        return x.clone()

    def insert(self, toks, past):
        """Every whole block of toks whose K/V past holds."""
        if not self.cap:
            return
        n = min(len(toks), past[0][0].shape[2])
        for i, k in enumerate(self.keys(toks, n)):
            if k in self.blocks:
                self.blocks.move_to_end(k)
                continue
            a, b = i * self.block, (i + 1) * self.block
            self.blocks[k] = [(self._held(K[:, :, a:b]),
                               self._held(V[:, :, a:b]),
                               KI[:, a:b].clone()) for K, V, KI in past]
            self.ghosts.pop(k, None)
            while len(self.blocks) > self.cap:
                old, _ = self.blocks.popitem(last=False)
                self.ghosts[old] = True
                while len(self.ghosts) > GHOSTS:
                    self.ghosts.popitem(last=False)

    def flush(self):
        self.blocks.clear()
        self.ghosts.clear()
        self.flushes += 1


# ---- the engine ----

class Engine:
    def __init__(self, model, sw, opts):
        self.m = model
        self.sw = sw
        self.o = opts
        self.cache = PrefixCache(opts.cache_tokens, opts.cache_block,
                                 opts.cache_kv_dtype)
        self.lock = threading.Lock()
        self.counter = 0
        self.cached_total = 0

    def _mode(self):
        return torch.inference_mode() if self.o.inert else torch.no_grad()

    def check_len(self, n, max_new, param):
        lim = self.o.max_model_len
        if n + max_new > lim:
            raise BadRequest(
                "This model's maximum context length is %d tokens. However, "
                "you requested %d tokens (%d in the messages, %d in the "
                "completion). Please reduce the length of the messages or "
                "completion." % (lim, n + max_new, n, max_new), param)
        if n == 0:
            raise BadRequest("the prompt is empty", param)

    def run(self, toks, max_new, cache_limit, prompt_lps=False,
            sample=None):
        """One request: toks (list of ids), up to max_new generated tokens
        (stopping after <|end|>), greedy unless sample = (temperature,
        generator). cache_limit: 0 bypasses the prefix cache (no read, no
        write), else at most that many tokens are matched. Returns a dict:
        prompt_lp (n-1, V) when prompt_lps (row i: position i+1), gen
        (ids), gen_lp (list of (V,) rows), finish, cached, recomputed."""
        with self.lock, self._mode():
            self.counter += 1
            return self._run(toks, max_new, cache_limit, prompt_lps, sample)

    def _run(self, toks, max_new, cache_limit, prompt_lps, sample):
        m, sw, blk = self.m, self.sw, self.o.cache_block
        n = len(toks)
        use = cache_limit != 0 and not prompt_lps
        cached, rec, past = (self.cache.lookup(toks, cache_limit) if use
                             else (0, 0, None))
        self.cached_total += cached
        shift = blk if (self.o.cache_pos_offset and cached) else 0
        x = torch.tensor(toks, dtype=torch.long)[None]
        at = cached
        if rec and self.o.recompute_differs:
            # the evicted prefix recomputed on another kernel
            _, past = m(x[:, at:at + rec], past=past, pos0=at,
                        sw=sw.copy(mix_bf16=True), pos_shift=shift,
                        want=[-1])
            at += rec
        want = None if prompt_lps else [-1]
        logits, past = m(x[:, at:], past=past, pos0=at, sw=sw,
                         pos_shift=shift, want=want)
        lp = torch.log_softmax(logits[0], -1)
        out = {"cached": cached, "recomputed": rec, "prompt_n": n}
        if prompt_lps:
            out["prompt_lp"] = lp[:-1]
        gen, glp = [], []
        finish = "length"
        cur = lp[-1]
        for i in range(max_new):
            if sample is not None and sample[0] > 0:
                pr = torch.softmax(cur / sample[0], -1)
                t = int(torch.multinomial(pr, 1, generator=sample[1]))
            else:
                t = int(torch.argmax(cur))
            gen.append(t)
            glp.append(cur)
            if t == M.END:
                finish = "stop"
                break
            if i + 1 == max_new or n + len(gen) >= self.o.max_model_len:
                break
            logits, past = m(torch.tensor([[t]]), past=past,
                             pos0=n + len(gen) - 1, sw=sw, decode=True,
                             pos_shift=shift)
            cur = torch.log_softmax(logits[0, -1], -1)
        out.update(gen=gen, gen_lp=glp, finish=finish)
        if use:
            self.cache.insert(toks + gen, past)
        return out


# ---- JSON helpers ----

def topk(row, k):
    """[(id, logprob)] of the k most probable tokens of a log-prob row."""
    if k <= 0:
        return []
    v, i = torch.topk(row, min(k, row.shape[0]))
    return list(zip(i.tolist(), v.tolist()))


def rank_of(row, t):
    return int((row > row[t]).sum()) + 1


def get_int(body, key, lo, hi, default):
    v = body.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise BadRequest("'%s' must be an integer from %d to %d" %
                         (key, lo, hi), key)
    return v


def get_num(body, key, lo, hi, default):
    v = body.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or \
            not lo <= v <= hi:
        raise BadRequest("'%s' must be a number from %g to %g" %
                         (key, lo, hi), key)
    return float(v)


def get_bool(body, key, default):
    v = body.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise BadRequest("'%s' must be a boolean" % key, key)
    return v


def get_ids(v, field):
    if not isinstance(v, list):
        raise BadRequest("'%s' must be an array of token ids" % field, field)
    for i, t in enumerate(v):
        if isinstance(t, bool) or not isinstance(t, int) or \
                not 0 <= t < M.VOCAB:
            raise BadRequest("'%s[%d]' is not a token id (0-%d)" %
                             (field, i, M.VOCAB - 1), field)
    return list(v)


def prompt_of(body, field):
    p = body.get(field)
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]
    if p is None:
        raise BadRequest("'%s' is required" % field, field)
    if isinstance(p, str):
        return M.encode(p)
    if isinstance(p, list):
        return get_ids(p, field)
    raise BadRequest("'%s' must be a string or an array of token ids" %
                     field, field)


def req_id(prefix, counter):
    return "%s-%s" % (prefix, hashlib.blake2b(str(counter).encode(),
                                              digest_size=8).hexdigest())


# ---- the endpoints ----

class App:
    def __init__(self, engine, opts, weights_sha):
        self.e = engine
        self.o = opts
        self.weights_sha = weights_sha

    def switches(self):
        o = self.o
        return {"mix_bf16": o.mix_bf16, "splitk": o.splitk,
                "indexer_topk": o.indexer_topk,
                "routed_scaling": o.routed_scaling
                if o.routed_scaling is not None
                else self.e.m.cfg["routed_scaling"],
                "inert": o.inert, "cache_kv_dtype": o.cache_kv_dtype,
                "cache_pos_offset": o.cache_pos_offset,
                "recompute_differs": o.recompute_differs}

    def cache_usage(self, usage, r):
        usage["prompt_tokens_details"] = {"cached_tokens": r["cached"]}
        return usage

    # GET

    def health(self, body):
        return {"status": "ok"}

    def models(self, body):
        name = self.o.model_name
        return {"object": "list",
                "data": [{"id": name, "object": "model", "created": 0,
                          "owned_by": "fidelity", "root": name,
                          "max_model_len": self.o.max_model_len}]}

    def version(self, body):
        return {"version": VERSION}

    def server_info(self, body):
        c = self.e.cache
        return {"model_path": self.o.model_name,
                "context_length": self.o.max_model_len,
                "max_total_num_tokens": c.cap * c.block if c.cap
                else self.o.max_model_len,
                "page_size": self.o.cache_block, "version": VERSION,
                "switches": self.switches(), "model": self.e.m.cfg,
                "weights_sha256": self.weights_sha,
                "threads": torch.get_num_threads(),
                "cache": {"blocks": len(c.blocks),
                          "cached_tokens": self.e.cached_total,
                          "flushes": c.flushes}}

    def flush(self, body):
        with self.e.lock:
            self.e.cache.flush()
        return None

    # /tokenize, /detokenize

    def tokenize(self, body):
        if "messages" in body:
            gen = get_bool(body, "add_generation_prompt", True)
            try:
                t = M.render(body["messages"], gen)
            except ValueError as ex:
                raise BadRequest(str(ex), "messages")
        elif isinstance(body.get("prompt"), str):
            t = M.encode(body["prompt"])
        else:
            raise BadRequest("'prompt' (a string) or 'messages' is required",
                             "prompt")
        return {"count": len(t), "max_model_len": self.o.max_model_len,
                "tokens": t}

    def detokenize(self, body):
        if "tokens" not in body:
            raise BadRequest("'tokens' is required", "tokens")
        return {"prompt": M.decode(get_ids(body["tokens"], "tokens"))}

    # /v1/completions

    def completions(self, body):
        toks = prompt_of(body, "prompt")
        max_new = get_int(body, "max_tokens", 0, 1 << 24, 16)
        echo = get_bool(body, "echo", False)
        as_ids = get_bool(body, "return_tokens_as_token_ids", False)
        k = get_int(body, "logprobs", 0, 20, -1)
        pk = get_int(body, "prompt_logprobs", 0, 20, -1)
        if get_bool(body, "stream", False):
            raise BadRequest("this server streams only /v1/chat/completions",
                             "stream")
        self.e.check_len(len(toks), max_new, "prompt")
        want_plp = pk >= 0 or (echo and k >= 0)
        # vLLM V1 skips the prefix cache for a request with prompt logprobs
        r = self.e.run(toks, max_new, 0 if want_plp else 1 << 30, want_plp)

        def name(t):
            return "token_id:%d" % t if as_ids else M.token_text(t)

        choice = {"index": 0}
        lpo = None
        if k >= 0:
            lpo = {"tokens": [], "token_logprobs": [], "top_logprobs": [],
                   "text_offset": []}
            off = [0]

            def add(t, lp, top):
                lpo["tokens"].append(name(t))
                lpo["token_logprobs"].append(lp)
                lpo["top_logprobs"].append(top)
                lpo["text_offset"].append(off[0])
                off[0] += len(M.decode_bytes([t]))

            def tops(row):
                return {name(i): v for i, v in topk(row, k)} if k > 0 \
                    else None
            if echo:
                add(toks[0], None, None)
                for i in range(1, len(toks)):
                    row = r["prompt_lp"][i - 1]
                    add(toks[i], float(row[toks[i]]), tops(row))
            for t, row in zip(r["gen"], r["gen_lp"]):
                add(t, float(row[t]), tops(row))
        out_ids = (toks if echo else []) + r["gen"]
        choice["text"] = M.decode(out_ids)
        choice["logprobs"] = lpo
        choice["finish_reason"] = r["finish"]
        if pk >= 0:
            plp = [None]
            for i in range(1, len(toks)):
                row = r["prompt_lp"][i - 1]
                t = toks[i]
                d = {str(t): {"logprob": float(row[t]),
                              "rank": rank_of(row, t),
                              "decoded_token": M.token_text(t)}}
                for rk, (j, v) in enumerate(topk(row, pk)):
                    d[str(j)] = {"logprob": v, "rank": rk + 1,
                                 "decoded_token": M.token_text(j)}
                plp.append(d)
            choice["prompt_logprobs"] = plp
        n = len(toks)
        g = len(r["gen"])
        return {"id": req_id("cmpl", self.e.counter),
                "object": "text_completion", "created": int(time.time()),
                "model": self.o.model_name, "choices": [choice],
                "usage": self.cache_usage(
                    {"prompt_tokens": n, "completion_tokens": g,
                     "total_tokens": n + g}, r)}

    # /generate: sglang (text / input_ids) or TGI (inputs)

    def generate(self, body):
        if "inputs" in body:
            return self.tgi(body)
        sp = body.get("sampling_params") or {}
        if not isinstance(sp, dict):
            raise BadRequest("'sampling_params' must be an object",
                             "sampling_params")
        if "input_ids" in body:
            toks = get_ids(body["input_ids"], "input_ids")
        elif isinstance(body.get("text"), str):
            toks = M.encode(body["text"])
        else:
            raise BadRequest("'text' (a string) or 'input_ids' is required",
                             "text")
        max_new = get_int(sp, "max_new_tokens", 0, 1 << 24, 128)
        want = get_bool(body, "return_logprob", False)
        start = get_int(body, "logprob_start_len", -1, 1 << 24, -1)
        topn = get_int(body, "top_logprobs_num", 0, 20, 0)
        ids_asked = body.get("token_ids_logprob")
        if ids_asked is not None:
            ids_asked = get_ids(ids_asked, "token_ids_logprob")
        self.e.check_len(len(toks), max_new, "input_ids")
        n = len(toks)
        scored = want and 0 <= start < n
        # sglang matches a prefix of at most logprob_start_len tokens when
        # logprobs are asked from there (schedule_batch.py, Req,
        # max_prefix_len); 0 bypasses the cache, as for the sim
        limit = start if (want and start >= 0) else 1 << 30
        r = self.e.run(toks, max_new, limit, scored)

        def triple(lp, t):
            return [lp, t, None]

        meta = {"id": req_id("gen", self.e.counter),
                "finish_reason": {"type": "stop", "matched": M.END}
                if r["finish"] == "stop"
                else {"type": "length", "length": max_new},
                "prompt_tokens": n, "completion_tokens": len(r["gen"]),
                "cached_tokens": r["cached"]}
        if want:
            in_lp, in_top, in_ids = [], [], []
            if scored:
                if start == 0:
                    in_lp.append([None, toks[0], None])
                    in_top.append(None)
                    in_ids.append(None)
                for i in range(max(start, 1), n):
                    row = r["prompt_lp"][i - 1]
                    in_lp.append(triple(float(row[toks[i]]), toks[i]))
                    in_top.append([triple(v, j) for j, v in topk(row, topn)])
                    if ids_asked is not None:
                        in_ids.append([triple(float(row[q]), q)
                                       for q in ids_asked])
            out_lp, out_top, out_ids = [], [], []
            for t, row in zip(r["gen"], r["gen_lp"]):
                out_lp.append(triple(float(row[t]), t))
                out_top.append([triple(v, j) for j, v in topk(row, topn)])
                if ids_asked is not None:
                    out_ids.append([triple(float(row[q]), q)
                                    for q in ids_asked])
            meta.update(input_token_logprobs=in_lp,
                        input_top_logprobs=in_top,
                        output_token_logprobs=out_lp,
                        output_top_logprobs=out_top)
            if ids_asked is not None:
                meta.update(input_token_ids_logprob=in_ids,
                            output_token_ids_logprob=out_ids)
        return {"text": M.decode(r["gen"]), "output_ids": r["gen"],
                "meta_info": meta}

    def tgi(self, body):
        prm = body.get("parameters") or {}
        if not isinstance(body.get("inputs"), str):
            raise BadRequest("'inputs' must be a string", "inputs")
        toks = M.encode(body["inputs"])
        max_new = get_int(prm, "max_new_tokens", 0, 1 << 24, 20)
        dec = get_bool(prm, "decoder_input_details", False)
        details = get_bool(prm, "details", False)
        topn = get_int(prm, "top_n_tokens", 0, 20, 0)
        self.e.check_len(len(toks), max_new, "inputs")
        r = self.e.run(toks, max_new, 0 if dec else 1 << 30, dec)

        def tok(t, lp, special=True):
            d = {"id": t, "text": M.token_text(t), "logprob": lp}
            if special:
                d["special"] = t >= 256
            return d
        out = {"generated_text": M.decode(r["gen"])}
        if details or dec:
            prefill = []
            if dec:
                prefill.append({"id": toks[0], "text": M.token_text(toks[0]),
                                "logprob": None})
                for i in range(1, len(toks)):
                    prefill.append(tok(toks[i], float(
                        r["prompt_lp"][i - 1][toks[i]]), False))
            det = {"finish_reason": "eos_token" if r["finish"] == "stop"
                   else "length", "generated_tokens": len(r["gen"]),
                   "seed": None, "prefill": prefill,
                   "tokens": [tok(t, float(row[t]))
                              for t, row in zip(r["gen"], r["gen_lp"])]}
            if topn:
                det["top_tokens"] = [[tok(j, v) for j, v in topk(row, topn)]
                                     for row in r["gen_lp"]]
            out["details"] = det
        return out

    # /v1/chat/completions

    def chat(self, body):
        if "messages" not in body:
            raise BadRequest("'messages' is required", "messages")
        stream = get_bool(body, "stream", False)
        so = body.get("stream_options")
        if so is not None and not isinstance(so, dict):
            raise BadRequest("'stream_options' must be an object",
                             "stream_options")
        include_usage = get_bool(so or {}, "include_usage", False)
        want_lp = get_bool(body, "logprobs", False)
        top = get_int(body, "top_logprobs", 0, 20, 0)
        mt1 = get_int(body, "max_tokens", 1, 1 << 24, 0)
        mt2 = get_int(body, "max_completion_tokens", 1, 1 << 24, 0)
        seed = get_int(body, "seed", -(1 << 62), 1 << 62, None)
        temp = get_num(body, "temperature", 0, 2, 1.0)
        nn = body.get("n")
        if nn is not None and nn != 1:
            raise BadRequest("'n' must be 1: this server returns one "
                             "choice", "n")
        try:
            toks = M.render(body["messages"], True)
        except ValueError as ex:
            raise BadRequest(str(ex), "messages")
        max_new = mt2 or mt1 or min(512, self.o.max_model_len - len(toks))
        self.e.check_len(len(toks), max_new, "messages")
        sample = None
        if temp > 0:
            g = torch.Generator()
            g.manual_seed(seed if seed is not None else self.e.counter + 1)
            sample = (temp, g)
        r = self.e.run(toks, max_new, 1 << 30, False, sample)
        gen = r["gen"]
        content_ids = gen[:-1] if gen and gen[-1] == M.END else gen
        text = M.decode(content_ids)
        n, g = len(toks), len(gen)
        usage = self.cache_usage({"prompt_tokens": n, "completion_tokens": g,
                                  "total_tokens": n + g}, r)
        lps = None
        if want_lp:
            lps = {"content": []}
            for t, row in zip(content_ids, r["gen_lp"]):
                e = self._top_entry(t, float(row[t]))
                e["top_logprobs"] = [self._top_entry(j, v)
                                     for j, v in topk(row, top)]
                lps["content"].append(e)
        cid = req_id("chatcmpl", self.e.counter)
        created = int(time.time())
        if not stream:
            return {"id": cid, "object": "chat.completion",
                    "created": created, "model": self.o.model_name,
                    "choices": [{"index": 0,
                                 "message": {"role": "assistant",
                                             "content": text},
                                 "logprobs": lps,
                                 "finish_reason": r["finish"]}],
                    "usage": usage}
        return ("stream", self._chunks(cid, created, content_ids, r, lps,
                                       usage if include_usage else None))

    @staticmethod
    def _top_entry(t, lp):
        b = M.decode_bytes([t])
        return {"token": M.token_text(t), "logprob": lp, "bytes": list(b)}

    def _chunks(self, cid, created, ids, r, lps, usage):
        def chunk(delta, finish=None, lp=None):
            c = {"index": 0, "delta": delta, "logprobs": lp,
                 "finish_reason": finish}
            return {"id": cid, "object": "chat.completion.chunk",
                    "created": created, "model": self.o.model_name,
                    "choices": [c]}
        out = [chunk({"role": "assistant", "content": ""})]
        pend = b""
        for i, t in enumerate(ids):
            pend += M.decode_bytes([t])
            try:
                s = pend.decode("utf-8")
            except UnicodeDecodeError:
                if len(pend) < 4 and i + 1 < len(ids):
                    continue  # the rest of the character comes next
                s = pend.decode("utf-8", "replace")
            pend = b""
            lp = {"content": [lps["content"][i]]} if lps else None
            out.append(chunk({"content": s}, None, lp))
        out.append(chunk({}, r["finish"]))
        if usage:
            out.append({"id": cid, "object": "chat.completion.chunk",
                        "created": created, "model": self.o.model_name,
                        "choices": [], "usage": usage})
        return out


ROUTES = {
    ("GET", "/health"): "health",
    ("GET", "/v1/models"): "models",
    ("GET", "/version"): "version",
    ("GET", "/get_server_info"): "server_info",
    ("POST", "/v1/chat/completions"): "chat",
    ("POST", "/v1/completions"): "completions",
    ("POST", "/generate"): "generate",
    ("POST", "/tokenize"): "tokenize",
    ("POST", "/detokenize"): "detokenize",
    ("GET", "/flush_cache"): "flush_sglang",
    ("POST", "/flush_cache"): "flush_sglang",
    ("POST", "/reset_prefix_cache"): "flush_vllm",
}


def make_handler(app):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "fidelity-model"

        def log_message(self, fmt, *a):
            if app.o.verbose:
                sys.stderr.write("%s\n" % (fmt % a))

        def _send(self, status, body, ctype="application/json"):
            if isinstance(body, (dict, list)):
                body = json.dumps(body, separators=(",", ":"),
                                  ensure_ascii=False).encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _error(self, status, msg, param=None):
            typ = ("server_error" if status >= 500 else "not_found_error"
                   if status == 404 else "invalid_request_error")
            self._send(status, {"error": {"message": msg, "type": typ,
                                          "param": param, "code": status}})

        def _stream(self, chunks):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            for c in chunks:
                self.wfile.write(b"data: " + json.dumps(
                    c, separators=(",", ":"),
                    ensure_ascii=False).encode() + b"\n\n")
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

        def _do(self, method):
            path = self.path.split("?", 1)[0]
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            if path in ("/flush_cache", "/reset_prefix_cache"):
                ep = app.o.flush_endpoints
                if (path == "/flush_cache" and ep not in ("both", "sglang")) \
                        or (path == "/reset_prefix_cache" and
                            ep not in ("both", "vllm")):
                    return self._error(404, "no endpoint at %s %s" %
                                       (method, path))
            fn = ROUTES.get((method, path))
            if fn is None:
                if any(p == path for _, p in ROUTES):
                    return self._error(405, "method %s is not allowed on %s"
                                       % (method, path))
                return self._error(404, "no endpoint at %s %s" %
                                   (method, path))
            body = {}
            if method == "POST" and fn not in ("flush_sglang", "flush_vllm"):
                try:
                    body = json.loads(raw.decode("utf-8")) if raw else None
                except UnicodeDecodeError:
                    return self._error(400, "request body is not valid "
                                       "UTF-8; send UTF-8 encoded JSON")
                except ValueError as ex:
                    return self._error(400, "request body is not valid "
                                       "JSON: %s" % ex)
                if not isinstance(body, dict):
                    return self._error(400, "request body must be a JSON "
                                       "object")
            try:
                if fn == "flush_sglang":
                    app.flush(body)
                    return self._send(200, b"Cache flushed.\n",
                                      "text/plain; charset=utf-8")
                if fn == "flush_vllm":
                    app.flush(body)
                    return self._send(200, b"")
                res = getattr(app, fn)(body)
            except BadRequest as ex:
                return self._error(ex.status, str(ex), ex.param)
            except Exception as ex:  # a bug: say it, keep serving
                import traceback
                traceback.print_exc()
                return self._error(500, "internal error: %r" % ex)
            if isinstance(res, tuple) and res[0] == "stream":
                return self._stream(res[1])
            self._send(200, res)

        def do_GET(self):
            self._do("GET")

        def do_POST(self):
            self._do("POST")

        def do_PUT(self):
            self._do("PUT")

        def do_DELETE(self):
            self._do("DELETE")

    return H


def env_flag(name):
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes",
                                                        "on")


def parse_args(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description="the test model over HTTP")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--weights", default=os.path.join(here, "weights.bin"))
    ap.add_argument("--model-name", default="fidelity-tiny")
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--cache-tokens", type=int, default=8192,
                    help="prefix cache capacity in tokens (0: off)")
    ap.add_argument("--cache-block", type=int, default=16)
    ap.add_argument("--flush-endpoints", default="both",
                    choices=["both", "sglang", "vllm", "none"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--verbose", action="store_true")
    E = os.environ.get
    ap.add_argument("--mix-bf16", action="store_true",
                    default=env_flag("FIDELITY_MODEL_MIX_BF16"))
    ap.add_argument("--splitk", type=int,
                    default=int(E("FIDELITY_MODEL_SPLITK") or 0))
    ap.add_argument("--indexer-topk", type=int,
                    default=int(E("FIDELITY_MODEL_INDEXER_TOPK") or 0))
    rs = E("FIDELITY_MODEL_ROUTED_SCALING")
    ap.add_argument("--routed-scaling", type=float,
                    default=float(rs) if rs else None)
    ap.add_argument("--inert", action="store_true",
                    default=env_flag("FIDELITY_MODEL_INERT"))
    ap.add_argument("--cache-kv-dtype", choices=["fp32", "bf16", "fp8"],
                    default=E("FIDELITY_MODEL_CACHE_KV_DTYPE") or "fp32")
    ap.add_argument("--cache-pos-offset", action="store_true",
                    default=env_flag("FIDELITY_MODEL_CACHE_POS_OFFSET"))
    ap.add_argument("--recompute-differs", action="store_true",
                    default=env_flag("FIDELITY_MODEL_RECOMPUTE_DIFFERS"))
    o = ap.parse_args(argv)
    if o.splitk < 0 or o.indexer_topk < 0 or o.cache_block < 1:
        ap.error("--splitk, --indexer-topk and --cache-block must be "
                 "positive")
    return o


def main(argv=None):
    o = parse_args(sys.argv[1:] if argv is None else argv)
    torch.set_num_threads(o.threads)
    torch.use_deterministic_algorithms(True)
    torch.set_grad_enabled(False)
    with open(o.weights, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    model, _ = M.load_weights(o.weights)
    if o.max_model_len > model.cfg["max_pos"]:
        sys.exit("serve.py: --max-model-len %d is past the model's %d "
                 "positions" % (o.max_model_len, model.cfg["max_pos"]))
    sw = M.Switches(mix_bf16=o.mix_bf16, splitk=o.splitk,
                    indexer_topk=o.indexer_topk,
                    routed_scaling=o.routed_scaling)
    eng = Engine(model, sw, o)
    app = App(eng, o, sha)
    srv = ThreadingHTTPServer((o.host, o.port), make_handler(app))
    srv.daemon_threads = True
    port = srv.server_address[1]
    host = o.host if ":" not in o.host else "[%s]" % o.host
    if o.port_file:
        tmp = o.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.replace(tmp, o.port_file)
    print("fidelity model: listening on http://%s:%d" % (host, port),
          flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
