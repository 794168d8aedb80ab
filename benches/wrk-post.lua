-- POSTs the file named by $BODY_FILE with no Content-Type, as CAPI does.
-- CAPI gives every GeneratePatches item a fresh UID on each call, so each request gets
-- its own item UIDs (the "uid" right before a "holderReference"), cycling through
-- $UID_VARIANTS precomputed bodies (default 1000; 1 sends the file unchanged).
local f = assert(io.open(os.getenv("BODY_FILE"), "rb"))
local body = f:read("*a")
f:close()
wrk.method = "POST"
wrk.headers["Content-Type"] = nil

local variants = tonumber(os.getenv("UID_VARIANTS") or "1000")
local bodies = {}
for v = 1, variants do
  local n = 0
  bodies[v] = body:gsub('"uid":(%s*)"[^"]*"(,%s*"holderReference")', function(sp, rest)
    n = n + 1
    return string.format('"uid":%s"%08x-0000-4000-8000-%012x"%s', sp, v, n, rest)
  end)
end

-- $MISS_PERCENT of the requests (default 0) get a settings value never sent before
-- ("production" becomes "production-<n>"), so no answer cache can have them.
local miss_percent = tonumber(os.getenv("MISS_PERCENT") or "0")
local counter = 0
local sent = 0
request = function()
  counter = counter % variants + 1
  sent = sent + 1
  if sent % 100 < miss_percent then
    local unique = bodies[counter]:gsub('"production"', '"production-' .. sent .. '"', 1)
    return wrk.format(nil, nil, nil, unique)
  end
  return wrk.format(nil, nil, nil, bodies[counter])
end

done = function(summary, latency, requests)
  io.write(string.format("RESULT rps=%.0f p50_ms=%.3f p99_ms=%.3f errors=%d non2xx=%d\n",
    summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.status))
end
