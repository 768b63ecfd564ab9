-- bench/paced.lua: appended to a wrk script after a line "mean_ms = N".
-- Each connection waits a random time after each response, exponential
-- with mean mean_ms, so C connections make about 1000 * C / mean_ms
-- requests/s arriving at random (nearly Poisson while a response takes
-- much less than mean_ms). A fixed delay() lines the connections up:
-- perf trace showed `fidelity sim` woken every 8 ms with 6 to 8 requests
-- at once, so a fixed-rate p99 measured the queue of such a burst at a
-- single-threaded upstream (about 8 service times), not the path.
-- Each Lua state (one per wrk thread) seeds from its own table address.
math.randomseed(os.time() + tonumber(tostring({}):match("0x(%x+)") or "0", 16) % 1000003)
function delay()
    return math.floor(-math.log(1 - math.random()) * mean_ms + 0.5)
end
