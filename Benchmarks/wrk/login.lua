-- Logins with the right password: each costs one scrypt verification at the server.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"email": "bench@example.com", "password": "correct horse battery staple"}'

function response(status, headers, body)
  if status ~= 200 then error("login failed: " .. status .. " " .. body) end
end
