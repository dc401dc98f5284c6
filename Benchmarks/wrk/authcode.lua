-- An app's authorization_code grant under load: every request authenticates the app (HTTP Basic, a keyed hash
-- compared in constant time), spends one code in the store (a transaction), starts a session (a refresh token
-- row), and signs an ES256 access token and an RS256 id token. Each code works once, so every wrk thread takes
-- its own share of the codes in AUTHCODE_FILE (one per line, made just before through the single sign-on a
-- browser uses). APP_BASIC is "base64(client_id:client_secret)"; APP_REDIRECT_ENCODED the redirect URI the codes
-- were issued for, form-encoded; AUTHCODE_THREADS wrk's -t.
local counter = 0

function setup(thread)
  thread:set("tid", counter)
  counter = counter + 1
end

local codes = {}
local next_code = 1

function init(args)
  local threads = tonumber(os.getenv("AUTHCODE_THREADS"))
  local index = 0
  for line in io.lines(os.getenv("AUTHCODE_FILE")) do
    if index % threads == tid then codes[#codes + 1] = line end
    index = index + 1
  end
end

wrk.method = "POST"
wrk.path = "/auth/token"
wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"
wrk.headers["Authorization"] = "Basic " .. os.getenv("APP_BASIC")
local redirect = os.getenv("APP_REDIRECT_ENCODED")

function request()
  local code = codes[next_code]
  if code == nil then error("authcode.lua: out of codes") end
  next_code = next_code + 1
  return wrk.format(nil, nil, nil, "grant_type=authorization_code&redirect_uri=" .. redirect .. "&code=" .. code)
end

function response(status, headers, body)
  if status ~= 200 then error("authcode.lua: HTTP " .. status .. " " .. body) end
end
