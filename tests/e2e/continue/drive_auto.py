"""Plays a Continue CLI session that ends in its automatic compaction, under
a pseudo-terminal (cn's TUI, --auto, drive.py's Tui), for a model whose
context record_auto.sh sets small (defaultCompletionOptions.contextLength):
two facts, then long notes pasted turn after turn until cn, before sending
a turn, finds the history near the limit and compacts it by itself (a
summary request, then the history replaced by its reply), then the
questions about the facts.
usage: drive_auto.py CN CONFIG PROJECT HOME LOG SIM_URL"""
import os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from drive import Tui  # noqa: E402

# Long turns with no fact the sim reads as one ("the X for Y is Z"): no
# " is " in them, so that its summary lists the two facts and nothing else.
NOTES = [
    "Here are my notes on the garden shed, keep them in mind. The roof has "
    "cedar shingles that were oiled last spring. The door sticks when the "
    "weather turns damp. The left window faces the orchard and gets the "
    "morning light. The shelves along the back wall hold the seed trays, "
    "the watering cans and a box of old brass hinges. The floor has packed "
    "gravel under a rubber mat that needs replacing soon.",
    "More notes, on the orchard this time. The apple trees along the north "
    "fence are the oldest and give small sour fruit, good for cider. The "
    "pear trees near the pond flower first and often suffer a late frost. "
    "The plum tree by the gate leans toward the path and needs a stake "
    "before the autumn storms. We cut the grass between the rows by hand "
    "because the mower cannot get under the branches.",
    "And notes on the pond. A small spring at the top of the field feeds "
    "it, and it drains through a clay pipe under the lane. The reeds on the "
    "east bank hide a family of moorhens every summer. The water goes green "
    "in August unless the pump runs at night. The wooden jetty has two "
    "loose boards near the end. The heron from the next farm visits most "
    "mornings, looking for the goldfish my neighbour released.",
    "Last notes, on the lane. It runs from the main road past the chapel "
    "and the old forge down to our gate. The hedges on both sides are "
    "hawthorn and hazel, laid in the traditional way. The ditch on the "
    "south side floods after heavy rain, and the council has promised to "
    "clear it. The postman leaves parcels in the milk churn by the cattle "
    "grid. The streetlight at the bend has been out all winter.",
]


def main():
    cn, cfg, proj, home, log, sim = sys.argv[1:7]
    t = Tui(cn, cfg, proj, home, log)
    t.pump(10)
    t.say("The access code for the blue door is 4812. Remember it.", 20)
    t.say("The combination for the bike lock is 3907. Remember that too.", 20)
    for note in NOTES:
        t.say(note, 30, delay=0.005)
    t.say("What is the access code for the blue door?", 40)
    t.say("What is the combination for the bike lock?", 25)
    t.stop()


if __name__ == "__main__":
    main()
