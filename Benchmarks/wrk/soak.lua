-- The soak run's traffic, one kind per wrk process, every status counted instead of aborting on the first
-- unexpected one: 2xx and 429 (the hashing pool or a limit saying "later") are fine, anything else is an error.
--   SOAK_METHOD, SOAK_PATH, SOAK_BODY, SOAK_CONTENT_TYPE, SOAK_AUTHORIZATION: a fixed request;
--   or REFRESH_TOKENS + TOKENS_PER_THREAD: refresh chains as in refresh.lua (each 200 carries the next token).
local counter = 0
local threads = {}

function setup(thread)
  thread:set("id", counter)
  table.insert(threads, thread)
  counter = counter + 1
end

function init(args)
  ok, limited, errors, last_error = 0, 0, 0, ""
  tokens = nil
  local file = os.getenv("REFRESH_TOKENS")
  if file ~= nil then
    tokens = {}
    local per = tonumber(os.getenv("TOKENS_PER_THREAD"))
    local index = 0
    for line in io.lines(file) do
      if index >= id * per and index < (id + 1) * per then table.insert(tokens, line) end
      index = index + 1
    end
  end
  local headers = {}
  if os.getenv("SOAK_CONTENT_TYPE") then headers["Content-Type"] = os.getenv("SOAK_CONTENT_TYPE") end
  if os.getenv("SOAK_AUTHORIZATION") then headers["Authorization"] = os.getenv("SOAK_AUTHORIZATION") end
  fixed = wrk.format(os.getenv("SOAK_METHOD") or "GET", os.getenv("SOAK_PATH") or "/", headers, os.getenv("SOAK_BODY"))
end

function request()
  if tokens == nil then return fixed end
  local token = table.remove(tokens)
  if token == nil then error("soak.lua: more connections than refresh tokens") end
  current = token
  return wrk.format("POST", "/auth/token", {["Content-Type"] = "application/x-www-form-urlencoded"},
    "grant_type=refresh_token&refresh_token=" .. token)
end

function response(status, headers, body)
  if status >= 200 and status < 300 then
    ok = ok + 1
    if tokens ~= nil then
      local token = string.match(body, '"refresh_token":"([%w_%-]+)"')
      if token ~= nil then table.insert(tokens, token) end
    end
  elseif status == 429 then
    limited = limited + 1
    if tokens ~= nil and current ~= nil then table.insert(tokens, current) end
  else
    errors = errors + 1
    last_error = status .. " " .. string.sub(body, 1, 200)
  end
end

function done(summary, latency, requests)
  local o, l, e, last = 0, 0, 0, ""
  for _, thread in ipairs(threads) do
    o = o + thread:get("ok")
    l = l + thread:get("limited")
    e = e + thread:get("errors")
    if thread:get("last_error") ~= "" then last = thread:get("last_error") end
  end
  io.write(string.format("soak ok=%d limited=%d errors=%d last_error=%s\n", o, l, e, string.gsub(last, "\n", " ")))
end
