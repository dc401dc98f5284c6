-- DPoP-bound requests under load (RFC 9449): every request carries a proof of its own, made ahead of the run by
-- Benchmarks/dpop_proofs.py, one per line in the file DPOP_PROOFS; thread i of DPOP_THREADS takes every line
-- whose number is i modulo DPOP_THREADS, so no proof is sent twice (a replay is refused).
--   DPOP_MODE=me       GET /auth/me with "Authorization: DPoP $ACCESS"
--   DPOP_MODE=refresh  the refresh grant, each connection spending its own chain as Benchmarks/wrk/refresh.lua
--                      does (REFRESH_TOKENS, TOKENS_PER_THREAD)
local counter = 0

function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
end

function init(args)
  mode = os.getenv("DPOP_MODE")
  local threads = tonumber(os.getenv("DPOP_THREADS"))
  proofs = {}
  local index = 0
  for line in io.lines(os.getenv("DPOP_PROOFS")) do
    if index % threads == id then table.insert(proofs, line) end
    index = index + 1
  end
  next_proof = 1
  tokens = {}
  if mode == "refresh" then
    local per = tonumber(os.getenv("TOKENS_PER_THREAD"))
    index = 0
    for line in io.lines(os.getenv("REFRESH_TOKENS")) do
      if index >= id * per and index < (id + 1) * per then table.insert(tokens, line) end
      index = index + 1
    end
  end
  access = os.getenv("ACCESS")
end

local function proof()
  local value = proofs[next_proof]
  if value == nil then error("dpop.lua: out of proofs (make more)") end
  next_proof = next_proof + 1
  return value
end

function request()
  if mode == "me" then
    return wrk.format("GET", "/auth/me", {["Authorization"] = "DPoP " .. access, ["DPoP"] = proof()})
  end
  local token = table.remove(tokens)
  if token == nil then error("dpop.lua: more connections than refresh tokens") end
  return wrk.format("POST", "/auth/token",
    {["Content-Type"] = "application/x-www-form-urlencoded", ["DPoP"] = proof()},
    "grant_type=refresh_token&refresh_token=" .. token)
end

function response(status, headers, body)
  if status ~= 200 then error("dpop.lua: HTTP " .. status .. " " .. body) end
  if mode == "refresh" then
    local token = string.match(body, '"refresh_token":"([%w_%-]+)"')
    if token == nil then error("dpop.lua: no refresh token in " .. body) end
    table.insert(tokens, token)
  end
end
