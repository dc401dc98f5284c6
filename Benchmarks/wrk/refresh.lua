-- The refresh grant under load. Each refresh token is single-use (a replay would revoke its session), so
-- every connection carries its own chain: the token a response returns is the one the next request spends.
-- Tokens come from the file named by REFRESH_TOKENS, one per line; each thread takes its own slice.
local counter = 0
local threads = {}

function setup(thread)
  thread:set("id", counter)
  table.insert(threads, thread)
  counter = counter + 1
end

function init(args)
  tokens = {}
  local per = tonumber(os.getenv("TOKENS_PER_THREAD"))
  local index = 0
  for line in io.lines(os.getenv("REFRESH_TOKENS")) do
    if index >= id * per and index < (id + 1) * per then table.insert(tokens, line) end
    index = index + 1
  end
  failures = 0
end

function request()
  local token = table.remove(tokens)
  if token == nil then error("refresh.lua: more connections than refresh tokens") end
  return wrk.format("POST", "/auth/token", {["Content-Type"] = "application/x-www-form-urlencoded"},
    "grant_type=refresh_token&refresh_token=" .. token)
end

function response(status, headers, body)
  local token = string.match(body, '"refresh_token":"([%w_%-]+)"')
  if status ~= 200 or token == nil then
    failures = failures + 1
    error("refresh failed: " .. status .. " " .. body)
  end
  table.insert(tokens, token)
end
