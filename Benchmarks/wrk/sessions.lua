-- The refresh grant across many sessions: each request spends the first refresh token of another session (from
-- the file REFRESH_TOKENS, one per line; thread i of SESSION_THREADS takes every line whose number is i modulo
-- SESSION_THREADS), so every request reads and writes rows no request before it touched. A thread that has spent
-- its share starts again from its first token, which is refused by then (400 invalid_grant: a token spent twice);
-- such answers are not errors, and `done` says how many first tokens were spent.
local counter = 0
local threads = {}

function setup(thread)
  thread:set("id", counter)
  table.insert(threads, thread)
  counter = counter + 1
end

function init(args)
  local count = tonumber(os.getenv("SESSION_THREADS"))
  tokens = {}
  local index = 0
  for line in io.lines(os.getenv("REFRESH_TOKENS")) do
    if index % count == id then table.insert(tokens, line) end
    index = index + 1
  end
  position = 0
  spent = 0
end

function request()
  position = position % #tokens + 1
  return wrk.format("POST", "/auth/token", {["Content-Type"] = "application/x-www-form-urlencoded"},
    "grant_type=refresh_token&refresh_token=" .. tokens[position])
end

function response(status, headers, body)
  if status == 200 then
    spent = spent + 1
  elseif status ~= 400 and status ~= 401 then
    error("sessions.lua: HTTP " .. status .. " " .. body)
  end
end

function done(summary, latency, requests)
  local total = 0
  for _, thread in ipairs(threads) do total = total + thread:get("spent") end
  io.write(string.format("sessions.lua: %d first refresh tokens spent\n", total))
end
