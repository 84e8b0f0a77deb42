-- wrk script for the five tests of the CRM benchmark (bench/SPEC.md, "Load").
--
-- Environment (read once per wrk thread):
--   CRM_TEST   json | db | queries | deals-list | deals-create
--   CRM_TOKEN  a bearer token for the authenticated tests (minted by `profiler bench`)
--
-- `done` prints one line starting with "WRK_JSON " holding the run's summary: requests,
-- duration (µs), socket errors by kind, non-2xx/3xx responses and latency percentiles (µs).
-- Source of the hooks and fields: wrk's SCRIPTING document (wrk 4.x).

local test = os.getenv("CRM_TEST") or "json"
local token = os.getenv("CRM_TOKEN") or ""
local stages = { "lead", "qualified", "proposal", "negotiation", "won", "lost" }

local thread_no = 0
function setup(thread)
  thread:set("thread_no", thread_no)
  thread_no = thread_no + 1
end

local n = 0
local auth = { ["Authorization"] = "Bearer " .. token }
local post_headers = { ["Authorization"] = "Bearer " .. token, ["Content-Type"] = "application/json" }

if test == "json" then
  wrk.path = "/json"
elseif test == "db" then
  wrk.path = "/db"
elseif test == "queries" then
  wrk.path = "/queries?queries=20"
elseif test == "deals-list" then
  -- Pages 1..50, per_page 20, cycling.
  request = function()
    n = n + 1
    local page = (n % 50) + 1
    return wrk.format("GET", "/api/deals?page=" .. page .. "&per_page=20", auth)
  end
elseif test == "deals-create" then
  -- A fresh title, amount and stage on every request.
  request = function()
    n = n + 1
    local tno = thread_no or 0
    local body = string.format('{"title":"deal %d-%d","amount_cents":%d,"stage":"%s"}',
      tno, n, (n * 7919 + tno * 104729) % 1000000000000, stages[(n % 6) + 1])
    return wrk.format("POST", "/api/deals", post_headers, body)
  end
else
  error("CRM_TEST must be one of json, db, queries, deals-list, deals-create; got " .. test)
end

function done(summary, latency, requests)
  local p = {}
  for _, q in ipairs({ 50, 75, 90, 99, 99.9 }) do
    p[#p + 1] = string.format('"%s":%d', tostring(q), latency:percentile(q))
  end
  io.write(string.format(
    'WRK_JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"min":%d,"max":%d,"mean":%.1f,"stdev":%.1f,"percentiles":{%s}}}\n',
    summary.requests, summary.duration, summary.bytes,
    summary.errors.connect, summary.errors.read, summary.errors.write,
    summary.errors.status, summary.errors.timeout,
    latency.min, latency.max, latency.mean, latency.stdev, table.concat(p, ",")))
end
