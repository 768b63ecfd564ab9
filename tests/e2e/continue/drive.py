"""Plays one Continue CLI session under a pseudo-terminal (cn's TUI):
a fact, a request interrupted with Esc, another turn, /compact, the
question. usage: drive.py CN CONFIG PROJECT HOME LOG"""
import os, pty, sys, time, select, signal
cn, cfg, proj, home, log = sys.argv[1:6]
env = dict(os.environ, HOME=home, TERM="xterm-256color", COLUMNS="120", LINES="40")
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
pump(10)
say("The access code for the blue door is 4812. Remember it.", 20)
say("Write a Python program for a tic-tac-toe game, with a long explanation.", 3)
os.write(fd, b"\x1b")  # Esc: interrupt the reply
pump(8)
say("Now make it save the results to a file.", 20)
say("/compact", 30)
say("What is the access code for the blue door?", 20)
os.kill(pid, signal.SIGTERM)
pump(2)
