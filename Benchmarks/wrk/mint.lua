-- The client_credentials grant under load: every request authenticates the client (HTTP Basic, a keyed
-- hash compared in constant time), reads it from the store and signs a fresh access token.
-- MINT_BASIC is "base64(client_id:client_secret)".
wrk.method = "POST"
wrk.path = "/auth/token"
wrk.body = "grant_type=client_credentials&ttl=300"
wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"
wrk.headers["Authorization"] = "Basic " .. os.getenv("MINT_BASIC")

function response(status, headers, body)
  if status ~= 200 then error("mint.lua: HTTP " .. status .. " " .. body) end
end
