-- wrk script for bench/sim.sh: every request POSTs one small chat body
-- (one user message, temperature 0) to the URL given on the command line.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"sim","temperature":0,"max_tokens":16,' ..
           '"messages":[{"role":"user","content":' ..
           '"The access code for the blue door is 4812. ' ..
           'What is the access code for the blue door?"}]}'

-- Count non-2xx answers so a run that only measured errors is visible.
local bad = 0
function response(status, headers, body)
    if status ~= 200 then bad = bad + 1 end
end

function done(summary, latency, requests)
    io.write(string.format("non-2xx (thread-local sample): %d\n", bad))
end
