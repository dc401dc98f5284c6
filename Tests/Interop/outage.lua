-- wrk script for the database-outage test (LoadTests): one connection per thread, each carrying its own
-- refresh-token chain and alternating a refresh grant with GET /auth/me on the access token it last got.
--
-- The test steers the run through the file named by OUTAGE_PHASE: "before" (database up), "down" (stopped,
-- until every broker's /healthz is 200 again), "after", and "stop" (each thread stops at its next response).
-- A 503 is expected only for a request that overlapped "down": one sent and answered in "before", or sent in
-- "after", is counted as unexpected. Any status other than 200 and 503 is counted as "other" (the chain then
-- retries the same token, which a lost rotation would turn into more errors, never into a success); so is a
-- 503 whose body is not the documented `server_error`.
-- The first 503 a thread sees creates OUTAGE_SEEN .. "-" .. thread id, so the test knows the outage reached
-- the traffic before it restarts the database. done() prints one line per thread for the test to read.
local counter = 0
local threads = {}

function setup(thread)
  thread:set("id", counter)
  table.insert(threads, thread)
  counter = counter + 1
end

local function phase()
  local file = io.open(os.getenv("OUTAGE_PHASE"), "r")
  if file == nil then return "before" end
  local value = file:read("*l") or "before"
  file:close()
  return value
end

function init(args)
  local index = 0
  for line in io.lines(os.getenv("REFRESH_TOKENS")) do
    if index == id then token = line end
    index = index + 1
  end
  if token == nil then error("outage.lua: no refresh token for thread " .. id) end
  access = nil
  kind = nil
  sent_in = nil
  next_is_me = false
  ok, s503, unexpected, other, last_other = 0, 0, 0, 0, ""
  seen = false
end

function request()
  sent_in = phase()
  if next_is_me and access ~= nil then
    kind = "me"
    return wrk.format("GET", "/auth/me", {["Authorization"] = "Bearer " .. access}, nil)
  end
  kind = "refresh"
  return wrk.format("POST", "/auth/token", {["Content-Type"] = "application/x-www-form-urlencoded"},
    "grant_type=refresh_token&refresh_token=" .. token)
end

function response(status, headers, body)
  local now = phase()
  if status == 200 then
    ok = ok + 1
    if kind == "refresh" then
      local refresh = string.match(body, '"refresh_token":"([%w_%-]+)"')
      local fresh = string.match(body, '"access_token":"([%w_%-%.]+)"')
      if refresh == nil or fresh == nil then
        other = other + 1
        last_other = "200 without tokens: " .. body
      else
        token, access = refresh, fresh
      end
    end
  elseif status == 503 and string.find(body, '"server_error"', 1, true) then
    s503 = s503 + 1
    if sent_in == "after" or (sent_in == "before" and now == "before") then
      unexpected = unexpected + 1
    end
    if not seen then
      seen = true
      local marker = io.open(os.getenv("OUTAGE_SEEN") .. "-" .. id, "w")
      if marker ~= nil then marker:close() end
    end
  else
    other = other + 1
    last_other = kind .. " " .. status .. " " .. body
  end
  next_is_me = not next_is_me
  if now == "stop" then wrk.thread:stop() end
end

function done(summary, latency, requests)
  for _, thread in ipairs(threads) do
    io.write(string.format("thread %d ok=%d s503=%d unexpected=%d other=%d token=%s last_other=%s\n",
      thread:get("id"), thread:get("ok"), thread:get("s503"), thread:get("unexpected"), thread:get("other"),
      thread:get("token"), string.gsub(thread:get("last_other"), "\n", " ")))
  end
end
