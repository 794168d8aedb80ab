-- POSTs the file named by $BODY_FILE with no Content-Type, as CAPI does.
local f = assert(io.open(os.getenv("BODY_FILE"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = nil

done = function(summary, latency, requests)
  io.write(string.format("RESULT rps=%.0f p50_ms=%.3f p99_ms=%.3f errors=%d non2xx=%d\n",
    summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.status))
end
