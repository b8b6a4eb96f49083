-- Decides requests in arrival order, each against its buckets, all or
-- nothing per request, exactly as core's Limit.Decide does. Mode "t" takes;
-- mode "u" takes and also returns, last, an array holding for every bucket
-- its value before the take and the value the take wrote ("" for none);
-- mode "r" gives back what earlier takes at time ARGV[1] consumed (Redis
-- Cluster, when a bucket in another slot denied), then reports each bucket
-- as it stands. In mode "r" each bucket has two more arguments: the value
-- its take wrote and the value before it, from mode "u".
--
-- ARGV[1]  the time in Unix ns as a decimal string, or "" for the server's TIME
-- ARGV[2]  "t" or "r"
-- ARGV[3]  the number of requests
-- ARGV[4]  the least time to live of a written key, in ms ("0": none)
-- then per request: its cost (an integer >= 0), its number of buckets, and
-- six numbers per bucket: the index of its key in KEYS, then algorithm, a, b, c, d
--   1 token bucket, 2 shaping: a = interval ns, b = fill time ns, c = burst, d = max wait ns
--   3 fixed window, 4 sliding window, 5 sliding log: a = window ns, b = limit
--   6 to 10: the same algorithms (6 token bucket ... 10 sliding log) for a
--   limit longer than 100 days, which decides in whole microseconds: as at
--   the time truncated to the microsecond, with a bucket's stored time
--   rounded up to one.
--
-- Returns, per request and bucket: allowed (0/1), reason, remaining, reset
-- ns, retry ns, delay ns; then the time used, as seconds and nanoseconds.
--
-- Values, each recording what it was written under (core's State.Span):
--   token bucket, shaping  "tat:tau"               (older "tat": tau taken as the limit's)
--   fixed window           "start:count:w"         (older "start:count": w taken as the limit's)
--   sliding window         "start:cur:prev:w"      (older "start:cur:prev": likewise)
--   sliding log            "w;at:cost,at:cost,..." (older without "w;": likewise)
-- A window value of another w, or an older one read under a window longer
-- than 100 days (none was written under one), starts afresh. A bucket value
-- of another tau keeps its share of the burst: its debt counts as
-- ceil(debt*tau'/tau) rounded up to the microsecond (see decide_bucket).
--
-- Precision: Lua numbers are doubles. An absolute time (~1.8e18 ns) does not
-- fit in 53 bits, so times are kept as (seconds, nanoseconds) pairs and only
-- differences are ever formed: below 2^53 ns at nanosecond resolution (every
-- span is at most 100 days there), whole microseconds below 2^56 ns at
-- microsecond resolution (spans up to 400 days), both held exactly. A
-- bucket's debt beyond that (an explicit time stepped back by days) is
-- reported rounded up to the next double, as core does (upDouble).
-- Floating-point results (the sliding window's estimate, a rescaled debt)
-- are computed in the same order of operations as core. States are stored
-- as decimal strings written with %d (tostring keeps only 14 digits), and
-- only integers are returned (a returned double is truncated).

local E9 = 1000000000
local TWO53 = 9007199254740992

local function split(str)
  local n = #str
  if n <= 9 then return 0, tonumber(str) end
  return tonumber(string.sub(str, 1, n - 9)), tonumber(string.sub(str, n - 8))
end

local function fmt(s, ns) return string.format('%d%09d', s, ns) end

-- a - b in ns, exact when the result is below 2^53 in magnitude, or a whole
-- number of microseconds below 2^56; otherwise the double nearest to it.
local function diff(as, ans, bs, bns) return (as - bs) * E9 + (ans - bns) end

-- The least double >= a - b, for a - b of about 2^53 or more (and pairs less
-- than 146 years apart): (as - bs) * E9 is exact, their sum rounds to
-- nearest, and r - hi is then exact, which tells whether it rounded down.
-- core's upDouble.
local function up_diff(as, ans, bs, bns)
  local hi, lo = (as - bs) * E9, ans - bns
  local r = hi + lo
  if r - hi < lo then
    local _, e = math.frexp(r)
    r = r + 2 ^ (e - 53)
  end
  return r
end

-- t + d, d an integer ns that a double holds: exact (fmod is exact, and so
-- is the quotient of the multiple of E9 it leaves).
local function add(s, ns, d)
  local r = math.fmod(d, E9)
  local q = (d - r) / E9
  local t = ns + r
  if t >= E9 then
    t, q = t - E9, q + 1
  elseif t < 0 then
    t, q = t + E9, q - 1
  end
  return s + q, t
end

-- A time pair rounded up to the microsecond.
local function ceil_us(s, ns)
  local r = math.fmod(ns, 1000)
  if r > 0 then
    ns = ns + 1000 - r
    if ns >= E9 then return s + 1, ns - E9 end
  end
  return s, ns
end

-- floor(a / b) for integers a >= 0, b > 0: fmod is exact, so is the quotient.
local function idiv(a, b) return (a - math.fmod(a, b)) / b end

local function later(as, ans, bs, bns) return as > bs or (as == bs and ans > bns) end

local function fields(v)
  local t = {}
  for f in string.gmatch(v, '[^:]+') do t[#t + 1] = f end
  return t
end

local now_s, now_ns
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now_s, now_ns = tonumber(t[1]), tonumber(t[2]) * 1000
else
  now_s, now_ns = split(ARGV[1])
end
local mode = ARGV[2]
local cost = 0 -- the cost of the request being decided
local min_ttl = tonumber(ARGV[4]) or 0

-- The epoch-aligned start of the window of size w ns (a whole number of ms)
-- holding now, as a pair.
local function window_start(w)
  local wms = w / 1000000
  local now_ms = now_s * 1000 + idiv(now_ns, 1000000)
  local start_ms = idiv(now_ms, wms) * wms
  return idiv(start_ms, 1000), math.fmod(start_ms, 1000) * 1000000
end

-- The sliding window estimate, in the same order of operations as core.
local function estimate(prev, cur, w, elapsed) return prev * (w - elapsed) / w + cur end
local function fits(prev, cur, w, elapsed, c, limit) return estimate(prev, cur, w, elapsed) + c <= limit end
-- The least multiple x of unit in [lo, hi] (multiples of unit) that fits.
local function first_fit(lo, hi, unit, prev, cur, w, c, limit)
  lo, hi = lo / unit, hi / unit
  while lo < hi do
    local mid = lo + idiv(hi - lo, 2)
    if fits(prev, cur, w, mid * unit, c, limit) then hi = mid else lo = mid + 1 end
  end
  return hi * unit
end
local function floor_pos(x) if x <= 0 then return 0 end return math.floor(x) end

-- core's rescaleDebt: the debt under a fill time of to of a bucket whose
-- debt is debt > 0 (whole microseconds) under a fill time of from.
local function rescale(debt, from, to)
  local q = math.ceil(debt * to / from)
  if q >= to then return to end
  q = q + math.fmod(1000 - math.fmod(q, 1000), 1000)
  if q > to then return to end
  return q
end

-- core's rescaledFit: the largest whole-microsecond debt in [0, debt] whose
-- rescaled debt is at most room.
local function rescaled_fit(debt, from, to, room)
  local lo, hi = 0, idiv(debt, 1000)
  while lo < hi do
    local mid = hi - idiv(hi - lo, 2)
    if rescale(mid * 1000, from, to) <= room then lo = mid else hi = mid - 1 end
  end
  return lo * 1000
end

-- Each decide returns the six reply fields and, when the bucket would change,
-- the value to store and its time to live in ns (0: delete).

-- a - b rounded up to the microsecond, exactly, for a > b less than 2^56
-- ns apart: (as - bs) * E9 is a whole number of microseconds.
local function diff_up_us(as, ans, bs, bns)
  local d = ans - bns
  return (as - bs) * E9 + d + math.fmod(1000 - math.fmod(d, 1000), 1000)
end

-- core's gcraSpan. now is the limit's (truncated to the microsecond at that
-- resolution). The time until full (the debt) is the stored TAT less now. A
-- value written under another fill time keeps its share: its debt is that
-- time rounded up to the microsecond, rescaled, and falls at the writer's
-- pace until a take here writes.
local function decide_bucket(key, alg, long, interval, tau, burst, maxwait)
  local v = redis.call('GET', key)
  local raw, debt = 0, 0
  local span, changed = nil, false
  local ts, tns
  if v then
    local i = string.find(v, ':', 1, true)
    if i then
      span = tonumber(string.sub(v, i + 1))
      v = string.sub(v, 1, i - 1)
    end
    changed = span ~= nil and span > 0 and span ~= tau
    ts, tns = split(v)
    if long then ts, tns = ceil_us(ts, tns) end
    raw = diff(ts, tns, now_s, now_ns)
    if raw < 0 then raw = 0 end
    debt = raw
    if changed and raw > 0 then debt = rescale(diff_up_us(ts, tns, now_s, now_ns), span, tau) end
  end
  local wmax = 0
  if alg == 2 then wmax = maxwait end
  local room = tau - debt
  local need = cost * interval
  local wait = need - room
  local roompos = room
  if roompos < 0 then roompos = 0 end
  local reset = raw
  if raw >= TWO53 then reset = up_diff(ts, tns, now_s, now_ns) end
  if cost == 0 or cost > burst then
    local reason = 0
    if cost > burst then reason = 2 end
    return { cost == 0 and 1 or 0, reason, idiv(roompos, interval), reset, 0, 0 }
  end
  if wait <= 0 or (alg == 2 and wait <= maxwait) then
    local delay = 0
    if wait > 0 then delay = wait end
    local left = room - need
    if left < 0 then left = 0 end
    local s, ns = add(now_s, now_ns, debt + need)
    -- Live until the TAT rounded up to the microsecond: full then under
    -- any limit.
    local ttl = debt + need
    local r = math.fmod(ns, 1000)
    if r > 0 then ttl = ttl + 1000 - r end
    return { 1, 0, idiv(left, interval), debt + need, 0, delay }, fmt(s, ns) .. ':' .. string.format('%d', tau), ttl
  end
  local retry
  if changed then
    local y = rescaled_fit(diff_up_us(ts, tns, now_s, now_ns), span, tau, tau + wmax - need)
    retry = raw - y
    if raw >= TWO53 then
      local ys, yns = add(ts, tns, -y)
      retry = up_diff(ys, yns, now_s, now_ns)
    end
  elseif raw >= TWO53 then
    local ys, yns = add(ts, tns, need - tau - wmax)
    retry = up_diff(ys, yns, now_s, now_ns)
  else
    retry = wait - wmax
  end
  return { 0, 1, idiv(roompos, interval), reset, retry, 0 }
end

-- Whether a window value recording window sw (nil: an older value) was
-- written under window w: an older one was, unless w is longer than 100 days.
local function same_window(sw, w, long)
  if sw == nil then return not long end
  return sw == w
end

local function decide_fixed(key, w, limit, long)
  local ss, sns = window_start(w)
  local count = 0
  local v = redis.call('GET', key)
  if v then
    local f = fields(v)
    if same_window(tonumber(f[3] or ''), w, long) then
      local as, ans = split(f[1])
      if later(as, ans, ss, sns) then ss, sns = as, ans end
      if as == ss and ans == sns then count = tonumber(f[2]) end
    end
  end
  local to_end = diff(ss, sns, now_s, now_ns) + w
  local reset = 0
  if count > 0 then reset = to_end end
  local rem = limit - count
  if rem < 0 then rem = 0 end
  if cost == 0 then return { 1, 0, rem, reset, 0, 0 } end
  if cost > limit then return { 0, 2, rem, reset, 0, 0 } end
  if count + cost <= limit then
    return { 1, 0, limit - count - cost, to_end, 0, 0 },
      fmt(ss, sns) .. ':' .. string.format('%d', count + cost) .. ':' .. string.format('%d', w), to_end
  end
  return { 0, 1, rem, reset, to_end, 0 }
end

local function decide_sliding(key, w, limit, long)
  local ss, sns = window_start(w)
  local cur, prev = 0, 0
  local v = redis.call('GET', key)
  if v then
    local f = fields(v)
    if same_window(tonumber(f[4] or ''), w, long) then
      local as, ans = split(f[1])
      if later(as, ans, ss, sns) then ss, sns = as, ans end
      local gap = diff(ss, sns, as, ans)
      if gap == 0 then
        cur, prev = tonumber(f[2]), tonumber(f[3])
      elseif gap == w then
        prev = tonumber(f[2])
      end
    end
  end
  local since = diff(now_s, now_ns, ss, sns)
  local elapsed = since
  if elapsed < 0 then elapsed = 0 end
  local function reset_after(c, p)
    if c > 0 then return 2 * w - since end
    if p > 0 then return w - since end
    return 0
  end
  local est = estimate(prev, cur, w, elapsed)
  if cost == 0 then return { 1, 0, floor_pos(limit - est), reset_after(cur, prev), 0, 0 } end
  if cost > limit then return { 0, 2, floor_pos(limit - est), reset_after(cur, prev), 0, 0 } end
  if fits(prev, cur, w, elapsed, cost, limit) then
    local reset = reset_after(cur + cost, prev)
    return { 1, 0, floor_pos(limit - estimate(prev, cur + cost, w, elapsed)), reset, 0, 0 },
      fmt(ss, sns) .. ':' .. string.format('%d', cur + cost) .. ':' .. string.format('%d', prev) .. ':' .. string.format('%d', w), reset
  end
  local unit = 1
  if long then unit = 1000 end
  local retry
  if cur + cost <= limit then
    retry = first_fit(elapsed, w, unit, prev, cur, w, cost, limit) - since
  else
    retry = w - since + first_fit(0, w, unit, cur, 0, w, cost, limit)
  end
  return { 0, 1, floor_pos(limit - est), reset_after(cur, prev), retry, 0 }
end

-- A sliding log is stored as "w;at:cost,at:cost,..." in time order.
local function decide_log(key, w, limit, long)
  local live = {}
  local sum = 0
  local v = redis.call('GET', key)
  if v then
    local body, sw = v, nil
    local j = string.find(v, ';', 1, true)
    if j then sw, body = tonumber(string.sub(v, 1, j - 1)), string.sub(v, j + 1) end
    if same_window(sw, w, long) then
      for at, c in string.gmatch(body, '(%d+):(%d+)') do
        local as, ans = split(at)
        if diff(as, ans, now_s, now_ns) + w > 0 then
          c = tonumber(c)
          live[#live + 1] = { as, ans, c }
          sum = sum + c
        end
      end
    end
  end
  local reset = 0
  local n = #live
  if n > 0 then
    reset = diff(live[n][1], live[n][2], now_s, now_ns) + w
    if reset < 0 then reset = 0 end
  end
  local rem = limit - sum
  if rem < 0 then rem = 0 end
  if cost == 0 then return { 1, 0, rem, reset, 0, 0 } end
  if cost > limit then return { 0, 2, rem, reset, 0, 0 } end
  if sum + cost <= limit then
    local as, ans = now_s, now_ns
    if n > 0 and later(live[n][1], live[n][2], as, ans) then as, ans = live[n][1], live[n][2] end
    if n > 0 and live[n][1] == as and live[n][2] == ans then
      live[n][3] = live[n][3] + cost
    else
      live[n + 1] = { as, ans, cost }
    end
    local parts = {}
    for k = 1, #live do parts[k] = fmt(live[k][1], live[k][2]) .. ':' .. string.format('%d', live[k][3]) end
    local ttl = diff(as, ans, now_s, now_ns) + w
    return { 1, 0, limit - sum - cost, ttl, 0, 0 }, string.format('%d', w) .. ';' .. table.concat(parts, ','), ttl
  end
  local need = sum + cost - limit
  local retry = 0
  for k = 1, n do
    need = need - live[k][3]
    if need <= 0 then
      retry = diff(live[k][1], live[k][2], now_s, now_ns) + w
      break
    end
  end
  return { 0, 1, rem, reset, retry, 0 }
end

local function store(key, value, ttl)
  -- PX has millisecond resolution: round up, so a key never expires before
  -- its bucket is full again. A longer life never changes a decision (the
  -- value itself says when the bucket is full), so a floor is safe.
  local ms = idiv(ttl + 999999, 1000000)
  if ms < 1 then ms = 1 end
  if ms < min_ttl then ms = min_ttl end
  redis.call('SET', key, value, 'PX', string.format('%d', ms))
end

-- An algorithm code: the algorithm (1 to 5) and whether the limit is longer
-- than 100 days (codes 6 to 10).
local function algorithm(code)
  if code > 5 then return code - 5, true end
  return code, false
end

-- Gives back cost to a bucket that an earlier take at now consumed. If the
-- bucket still holds what that take wrote, its value before the take comes
-- back exactly (as if the take never happened); if another take wrote it
-- since, cost is given back arithmetically, never more than was taken: not
-- at all if that take was under another fill time or window, whose value
-- does not hold ours.
local function refund(key, code, a, b, written, before)
  local v = redis.call('GET', key)
  if written ~= '' and v == written then
    if before == '' then redis.call('DEL', key) else redis.call('SET', key, before, 'KEEPTTL') end
    return
  end
  if not v then return end
  local alg, long = algorithm(code)
  if alg == 1 or alg == 2 then
    local f = fields(v)
    if f[2] and tonumber(f[2]) ~= b then return end
    local ts, tns = split(f[1])
    local s, ns = add(ts, tns, -cost * a)
    local left = diff(s, ns, now_s, now_ns)
    if left <= 0 then redis.call('DEL', key) else store(key, fmt(s, ns) .. ':' .. string.format('%d', b), left) end
  elseif alg == 3 or alg == 4 then
    local f = fields(v)
    if not same_window(tonumber(f[alg] or ''), a, long) then return end
    local ss, sns = window_start(a)
    local as, ans = split(f[1])
    if as == ss and ans == sns then
      local count = tonumber(f[2]) - cost
      if count < 0 then count = 0 end
      f[2] = string.format('%d', count)
      redis.call('SET', key, table.concat(f, ':'), 'KEEPTTL')
    end
  else
    local body, prefix = v, ''
    local j = string.find(v, ';', 1, true)
    local sw = nil
    if j then sw, prefix, body = tonumber(string.sub(v, 1, j - 1)), string.sub(v, 1, j), string.sub(v, j + 1) end
    if not same_window(sw, a, long) then return end
    local mns = now_ns
    if long then mns = mns - math.fmod(mns, 1000) end
    local mark = fmt(now_s, mns) .. ':'
    local parts, done = {}, false
    for entry in string.gmatch(body, '[^,]+') do
      if not done and string.sub(entry, 1, #mark) == mark then
        local c = tonumber(string.sub(entry, #mark + 1)) - cost
        done = true
        if c > 0 then parts[#parts + 1] = mark .. string.format('%d', c) end
      else
        parts[#parts + 1] = entry
      end
    end
    if #parts == 0 then redis.call('DEL', key) else redis.call('SET', key, prefix .. table.concat(parts, ','), 'KEEPTTL') end
  end
end

-- Decides one bucket; a limit longer than 100 days at the time truncated to
-- the microsecond.
local function decide(key, code, a, b, c, d)
  local alg, long = algorithm(code)
  local saved = now_ns
  if long then now_ns = now_ns - math.fmod(now_ns, 1000) end
  local st, value, ttl
  if alg == 1 or alg == 2 then
    st, value, ttl = decide_bucket(key, alg, long, a, b, c, d)
  elseif alg == 3 then
    st, value, ttl = decide_fixed(key, a, b, long)
  elseif alg == 4 then
    st, value, ttl = decide_sliding(key, a, b, long)
  else
    st, value, ttl = decide_log(key, a, b, long)
  end
  now_ns = saved
  return st, value, ttl
end

local out, undo = {}, {}
local stride = 6
if mode == 'r' then stride = 8 end
local p = 4
for _ = 1, tonumber(ARGV[3]) do
  cost = tonumber(ARGV[p + 1])
  local m = tonumber(ARGV[p + 2])
  local keys, algs, as, bs, cs, ds = {}, {}, {}, {}, {}, {}
  for i = 1, m do
    local q = p + 2 + (i - 1) * stride
    keys[i] = KEYS[tonumber(ARGV[q + 1])]
    algs[i], as[i], bs[i] = tonumber(ARGV[q + 2]), tonumber(ARGV[q + 3]), tonumber(ARGV[q + 4])
    cs[i], ds[i] = tonumber(ARGV[q + 5]), tonumber(ARGV[q + 6])
    if not keys[i] or not algs[i] or algs[i] < 1 or algs[i] > 10 or algs[i] ~= math.floor(algs[i]) then
      return redis.error_reply('ERR ratelimit: bad arguments for bucket ' .. i)
    end
    if mode == 'r' then
      refund(keys[i], algs[i], as[i], bs[i], ARGV[q + 7], ARGV[q + 8])
    end
  end
  p = p + 2 + m * stride
  if mode == 'r' then cost = 0 end -- then report each bucket as it stands
  local before = {}
  if mode == 'u' then
    for i = 1, m do before[i] = redis.call('GET', keys[i]) or '' end
  end
  local base = #out
  local values, ttls = {}, {}
  local allowed = true
  for i = 1, m do
    local st, value, ttl = decide(keys[i], algs[i], as[i], bs[i], cs[i], ds[i])
    if st[1] == 0 then allowed = false end
    values[i], ttls[i] = value, ttl
    for k = 1, 6 do out[#out + 1] = st[k] end
  end
  if allowed and cost > 0 then
    for i = 1, m do
      if values[i] then store(keys[i], values[i], ttls[i]) end
    end
  end
  if mode == 'u' then
    for i = 1, m do
      undo[#undo + 1] = before[i]
      undo[#undo + 1] = (allowed and cost > 0 and values[i]) or ''
    end
  end
  if not allowed then
    -- Nothing is consumed: report each allowing bucket's balance as it
    -- stands, reading with cost 0.
    local saved = cost
    cost = 0
    for i = 1, m do
      local o = base + (i - 1) * 6
      if out[o + 1] == 1 then
        local st = decide(keys[i], algs[i], as[i], bs[i], cs[i], ds[i])
        for k = 1, 6 do out[o + k] = st[k] end
      end
    end
    cost = saved
  end
end
out[#out + 1] = now_s
out[#out + 1] = now_ns
if mode == 'u' then out[#out + 1] = undo end
return out
