"""Plays one Continue CLI session under a pseudo-terminal (cn's TUI, --auto):
a fact, a tool call (the sim calls Read on "Call the Read tool with ..."; cn
runs it and sends the result back), a long reply interrupted with Esc while
it streams (the sim slowed to 300 ms a token for that turn through
POST /sim/config), another turn, /compact, the question.
usage: drive.py CN CONFIG PROJECT HOME LOG SIM_URL"""
import os, pty, sys, time, select, signal, urllib.request
cn, cfg, proj, home, log, sim = sys.argv[1:7]
env = dict(os.environ, HOME=home, TERM="xterm-256color", COLUMNS="120", LINES="40")
with open(os.path.join(proj, "notes.txt"), "w") as f:
    f.write("Deploy window: Thursday 14:00. Owner: Dana.\n")
pid, fd = pty.fork()
if pid == 0:
    os.chdir(proj)
    os.execve(cn, [cn, "--config", cfg, "--auto"], env)
out = open(log, "wb")
def pump(secs):
    end = time.time() + secs
    while time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                data = os.read(fd, 65536)
            except OSError:
                return
            out.write(data); out.flush()
def say(text, wait):
    for ch in text:
        os.write(fd, ch.encode()); time.sleep(0.02)
    pump(0.5)
    os.write(fd, b"\r")
    pump(wait)
def sim_config(body):
    req = urllib.request.Request(sim + "/sim/config", data=body.encode(),
                                 headers={"content-type": "application/json"})
    urllib.request.urlopen(req, timeout=5).read()
pump(10)
say("The access code for the blue door is 4812. Remember it.", 20)
say('Call the Read tool with {"filepath": "notes.txt"}', 25)
sim_config('{"token_interval_ms": 300}')
say("Write a Python program for a tic-tac-toe game, with a long explanation.", 8)
os.write(fd, b"\x1b")  # Esc while the reply streams: interrupt it
pump(15)
sim_config('{"token_interval_ms": 40}')
pump(5)
say("Now make it save the results to a file.", 20)
say("/compact", 30)
say("What is the access code for the blue door?", 20)
os.kill(pid, signal.SIGTERM)
pump(2)
