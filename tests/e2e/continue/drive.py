"""Plays one Continue CLI session under a pseudo-terminal (cn's TUI, --auto):
a fact, a tool call (the sim calls Read on "Call the Read tool with ..."; cn
runs it and sends the result back), a long reply interrupted with Esc while
it streams (the sim slowed to 300 ms a token for that turn through
POST /sim/config), another turn, /compact, the question.
usage: drive.py CN CONFIG PROJECT HOME LOG SIM_URL
The helpers (Tui, sim_config) serve the other drivers of this folder
(drive_auto.py)."""
import os, pty, sys, time, select, signal, urllib.request


class Tui:
    """cn --config CONFIG --auto in PROJECT under a pseudo-terminal; what it
    prints goes to LOG."""

    def __init__(self, cn, cfg, proj, home, log):
        env = dict(os.environ, HOME=home, TERM="xterm-256color",
                   COLUMNS="120", LINES="40")
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.chdir(proj)
            os.execve(cn, [cn, "--config", cfg, "--auto"], env)
        self.out = open(log, "wb")

    def pump(self, secs):
        end = time.time() + secs
        while time.time() < end:
            r, _, _ = select.select([self.fd], [], [], 0.2)
            if r:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:
                    return
                self.out.write(data)
                self.out.flush()

    def type(self, text, delay=0.02):
        for ch in text:
            os.write(self.fd, ch.encode())
            time.sleep(delay)

    def say(self, text, wait, delay=0.02):
        self.type(text, delay)
        self.pump(0.5)
        os.write(self.fd, b"\r")
        self.pump(wait)

    def key(self, data):
        os.write(self.fd, data)

    def stop(self):
        os.kill(self.pid, signal.SIGTERM)
        self.pump(2)


def sim_config(sim, body):
    req = urllib.request.Request(sim + "/sim/config", data=body.encode(),
                                 headers={"content-type": "application/json"})
    urllib.request.urlopen(req, timeout=5).read()


def main():
    cn, cfg, proj, home, log, sim = sys.argv[1:7]
    with open(os.path.join(proj, "notes.txt"), "w") as f:
        f.write("Deploy window: Thursday 14:00. Owner: Dana.\n")
    t = Tui(cn, cfg, proj, home, log)
    t.pump(10)
    t.say("The access code for the blue door is 4812. Remember it.", 20)
    t.say('Call the Read tool with {"filepath": "notes.txt"}', 25)
    sim_config(sim, '{"token_interval_ms": 300}')
    t.say("Write a Python program for a tic-tac-toe game, with a long explanation.", 8)
    t.key(b"\x1b")  # Esc while the reply streams: interrupt it
    t.pump(15)
    sim_config(sim, '{"token_interval_ms": 40}')
    t.pump(5)
    t.say("Now make it save the results to a file.", 20)
    t.say("/compact", 30)
    t.say("What is the access code for the blue door?", 20)
    t.stop()


if __name__ == "__main__":
    main()
