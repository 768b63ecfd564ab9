"""Training text for the test model, generated deterministically (no
download anywhere): chat conversations in the template of model.py (facts
stated and asked back, as fidelity drift's built-in corpus and fidelity
probe's cases state them), variables, arithmetic, copying and counting,
the first-message question, and raw chunks of the repository's own
Markdown documents. The same seed gives the same token stream on any
machine and with any number of worker processes.
"""

import os
import random

from model import BOS, encode, render

# drift's built-in corpus (src/drift/corpus.c)
D_COLORS = ["blue", "red", "green", "amber", "white", "silver", "black",
            "violet"]
D_THINGS = ["door", "locker", "vault", "gate", "server", "drawer", "safe",
            "account"]
D_ATTRS = ["access code", "room number", "pin", "serial", "budget",
           "owner id"]
D_WORDS = ["the", "report", "shows", "that", "our", "team", "moved",
           "quickly", "through", "several", "steps", "before", "lunch",
           "while", "weather", "stayed", "mild", "and", "nobody", "noticed",
           "a", "small", "change", "in", "plans", "so", "we", "wrote",
           "notes", "about", "budgets", "tickets", "meetings", "drafts",
           "ideas", "later"]
D_SYSTEM = ("You are a careful assistant. Remember every fact the user "
            "states and answer questions about them.")

# probe's cases (src/probe/gen.c, src/probe/filler.c)
P_ATTRS = ["access code", "locker number", "badge number", "parking spot",
           "room number", "ticket number", "serial number", "pager number"]
P_ENTS = ["the blue door", "the north gate", "the red locker",
          "the server room", "the east wing", "the green van",
          "the loading dock", "the west tower", "the main office",
          "the cold store"]
P_INTROS = ["Here is the next part of the material.",
            "Please keep this in mind for later.",
            "This is the output I got.", "Take a look at this.",
            "Here is some more context for the task."]
P_ACKS = ["Got it.", "Thanks, noted.", "I have read it.", "Understood."]
P_SUBJ = ["Our team", "The committee", "A visiting engineer",
          "The night shift", "Her grandmother", "The museum staff",
          "Two drivers", "The new intern", "Several neighbours",
          "The harbour crew", "My cousin", "The river authority",
          "A small group", "The choir", "The caretaker"]
P_VERB = ["reviewed", "painted", "discussed", "postponed", "measured",
          "repaired", "described", "sorted", "delivered", "photographed",
          "rebuilt", "cleaned", "counted", "moved", "catalogued"]
P_OBJ = ["the quarterly budget", "the old bridge", "a stack of letters",
         "the garden fence", "several broken lamps", "the weather report",
         "a long list of complaints", "the library catalogue",
         "the spare tyres", "the festival programme", "the kitchen shelves",
         "a crate of apples", "the station clock", "the village map",
         "the rowing boats"]
P_TAIL = ["before lunch", "after the storm had passed",
          "without much enthusiasm", "in the early morning",
          "while the market was closing", "with great care",
          "during the long weekend", "despite the rain", "as the light faded",
          "for the third time that month", "on a quiet afternoon",
          "in record time"]
P_PROGRAMS = ["tic-tac-toe game", "snake game", "todo list manager",
              "prime number sieve", "unit converter", "password generator",
              "hangman game", "markdown previewer"]
SYSTEMS = [D_SYSTEM, "You are a helpful assistant.",
           "You are a concise assistant. Answer from the conversation.",
           "You are a careful assistant."]

DOC_FILES = ["README.md", "docs/DRIFT.md", "docs/SIM.md", "docs/PROBE.md",
             "docs/BISECT.md", "docs/AUDIT.md", "docs/RECORD.md",
             "docs/DESIGN.md", "docs/REPORT.md"]


def drift_filler(r, chars):
    out = []
    n = 0
    while n < chars:
        k = 6 + r.randrange(10)
        s = " ".join(r.choice(D_WORDS) for _ in range(k)) + "."
        out.append(s)
        n += len(s) + 1
    return " ".join(out)


def probe_filler(r, chars):
    out = []
    n = 0
    while n < chars:
        s = "%s %s %s %s." % (r.choice(P_SUBJ), r.choice(P_VERB),
                              r.choice(P_OBJ), r.choice(P_TAIL))
        out.append(s)
        n += len(s) + 1
    return " ".join(out)


def conv_drift(r, chars):
    """drift's built-in conversation shape; questions get answered."""
    msgs = [{"role": "system", "content": D_SYSTEM}]
    facts = []
    total = 0
    while total < chars:
        v = 1000 + r.randrange(9000)
        at = r.choice(D_ATTRS)
        ent = "the %s %s" % (r.choice(D_COLORS), r.choice(D_THINGS))
        u = "The %s for %s is %d. " % (at, ent, v)
        facts.append((at, ent, v))
        u += drift_filler(r, 200 + r.randrange(600))
        q = None
        if len(facts) > 1 and r.randrange(2):
            q = r.choice(facts)
            # the latest value of that attribute and entity answers
            for f in facts:
                if f[0] == q[0] and f[1] == q[1]:
                    q = f
            u += " What is the %s for %s?" % (q[0], q[1])
        msgs.append({"role": "user", "content": u})
        if q and r.randrange(10) < 7:
            a = "The %s for %s is %d." % q
            if r.randrange(2):
                a += " " + drift_filler(r, 40 + r.randrange(200))
        else:
            a = "Noted. " + drift_filler(r, 80 + r.randrange(300))
        msgs.append({"role": "assistant", "content": a})
        total += len(u) + len(a)
    return msgs


def conv_probe(r, chars):
    """probe's needle shape: facts in filler turns, a final question."""
    msgs = [{"role": "system", "content": r.choice(SYSTEMS)}]
    turns = 3 + r.randrange(6)
    per = max(60, chars // turns)
    facts = []
    for t in range(turns):
        body = r.choice(P_INTROS) + " " + probe_filler(r, per)
        if r.randrange(3) < 2:
            at, ent = r.choice(P_ATTRS), r.choice(P_ENTS)
            v = 100000 + r.randrange(900000)
            stmt = "The %s for %s is %d." % (at, ent, v)
            facts = [f for f in facts if f[:2] != (at, ent)]
            facts.append((at, ent, v))
            cut = body.find(". ", r.randrange(max(1, len(body))))
            body = body + " " + stmt if cut < 0 else \
                body[:cut + 2] + stmt + " " + body[cut + 2:]
        msgs.append({"role": "user", "content": body})
        msgs.append({"role": "assistant", "content": r.choice(P_ACKS)})
    if facts:
        at, ent, v = r.choice(facts)
        msgs.append({"role": "user",
                     "content": "What is the %s for %s?" % (at, ent)})
        msgs.append({"role": "assistant",
                     "content": "The %s for %s is %d." % (at, ent, v)})
    else:
        at, ent = r.choice(P_ATTRS), r.choice(P_ENTS)
        msgs.append({"role": "user",
                     "content": "What is the %s for %s?" % (at, ent)})
        msgs.append({"role": "assistant", "content":
                     "I don't see any earlier message about that; this "
                     "looks like the start of our conversation."})
    return msgs


def conv_first(r, chars):
    prog = r.choice(P_PROGRAMS)
    first = "Write a %s in Python." % prog
    msgs = [{"role": "system", "content": r.choice(SYSTEMS)},
            {"role": "user", "content": first},
            {"role": "assistant", "content": "Here is a first version of "
             "the %s. %s" % (prog, probe_filler(r, 100 + r.randrange(300)))}]
    for _ in range(r.randrange(4)):
        msgs.append({"role": "user", "content": probe_filler(r, 100 +
                                                             r.randrange(400))})
        msgs.append({"role": "assistant", "content": r.choice(P_ACKS)})
    msgs.append({"role": "user", "content": "What did my first message ask "
                 "for?"})
    msgs.append({"role": "assistant", "content":
                 "Your first message asked: \"%s\"." % first})
    return msgs


def conv_vars(r, chars):
    names = r.sample(["A", "B", "C", "D", "X", "Y", "Z", "N", "K", "P"], 4)
    v = r.randrange(1000)
    lines = ["Let %s = %d." % (names[0], v)]
    for i in range(1, 4):
        lines.append("Let %s = %s." % (names[i], names[i - 1]))
    r.shuffle(lines)
    q = r.choice(names)
    msgs = [{"role": "system", "content": r.choice(SYSTEMS)},
            {"role": "user", "content": " ".join(lines) + " " +
             probe_filler(r, r.randrange(400))},
            {"role": "assistant", "content": r.choice(P_ACKS)},
            {"role": "user", "content": "What is the value of %s?" % q},
            {"role": "assistant", "content": "The value of %s is %d." %
             (q, v)}]
    return msgs


def conv_math(r, chars):
    msgs = [{"role": "system", "content": r.choice(SYSTEMS)}]
    for _ in range(2 + r.randrange(8)):
        a, b = r.randrange(100), r.randrange(100)
        op = r.choice(["+", "-", "*"])
        if op == "*":
            a, b = r.randrange(13), r.randrange(13)
        res = a + b if op == "+" else a - b if op == "-" else a * b
        msgs.append({"role": "user", "content": "What is %d %s %d?" %
                     (a, op, b)})
        msgs.append({"role": "assistant", "content": "%d %s %d = %d." %
                     (a, op, b, res)})
    return msgs


def conv_copy(r, chars):
    msgs = [{"role": "system", "content": r.choice(SYSTEMS)}]
    for _ in range(1 + r.randrange(3)):
        k = 3 + r.randrange(20)
        pool = D_WORDS + [w.split()[-1] for w in P_OBJ] + P_VERB
        s = " ".join(r.choice(pool) for _ in range(k))
        msgs.append({"role": "user", "content": "Repeat after me: " + s})
        msgs.append({"role": "assistant", "content": s})
    return msgs


def conv_count(r, chars):
    a = r.randrange(200)
    b = a + 5 + r.randrange(40)
    return [{"role": "system", "content": r.choice(SYSTEMS)},
            {"role": "user", "content": "Count from %d to %d." % (a, b)},
            {"role": "assistant", "content": ", ".join(
                str(i) for i in range(a, b + 1)) + "."}]


def load_docs(root):
    texts = []
    for f in DOC_FILES:
        p = os.path.join(root, f)
        if os.path.exists(p):
            with open(p, encoding="utf-8") as fh:
                texts.append(fh.read())
    return texts


def doc_chunk(r, docs, chars):
    d = r.choice(docs)
    if len(d) <= chars:
        return d
    at = r.randrange(len(d) - chars)
    nl = d.rfind("\n", 0, at)
    at = nl + 1 if nl >= 0 else at
    return d[at:at + chars]


KINDS = [(conv_drift, 30), (conv_probe, 25), (conv_first, 5),
         (conv_vars, 8), (conv_math, 8), (conv_copy, 8), (conv_count, 4)]


def document(r, docs):
    """One document's token ids."""
    if docs and r.randrange(100) < 10:
        return [BOS] + encode(doc_chunk(r, docs, 300 + r.randrange(4000)))
    tot = sum(w for _, w in KINDS)
    x = r.randrange(tot)
    for fn, w in KINDS:
        if x < w:
            break
        x -= w
    chars = int(300 * (1.0 + 20 * r.random() ** 2))  # 300 .. 6300 chars
    return render(fn(r, chars), add_generation_prompt=False)


def chunk(seed, index, n_tokens, docs):
    """At least n_tokens of whole documents from seed and chunk index."""
    r = random.Random("%d/%d" % (seed, index))
    out = []
    while len(out) < n_tokens:
        out.extend(document(r, docs))
    return out
