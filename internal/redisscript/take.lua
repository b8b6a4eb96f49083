-- Decides requests in arrival order, each against its buckets, all or
-- nothing per request, exactly as core's Limit.Decide does. Mode "t" takes;
-- mode "u" takes and also returns an array holding for every bucket its
-- value before the take and the value the take wrote ("" for none);
-- mode "r" gives back what earlier takes at the call's time consumed (Redis
-- Cluster, when a bucket in another slot denied), then reports each bucket
-- as it stands; modes "l" and "g" lease tokens and give them back.
--
-- ARGV[1]  the call, little-endian: a header of 25 bytes, the limits,
--          then the requests. The header: the mode (one byte, "t", "u",
--          "r", "l" or "g"), the time as Unix seconds (int64; -1 for the
--          server's TIME) and nanoseconds (uint32), the least time to live
--          of a written key in ms (int64; 0: none) and the number of
--          limits (uint32). Each limit is five doubles, code, a, b, c, d:
--   1 token bucket, 2 shaping: a = interval ns, b = fill time ns, c = burst, d = max wait ns
--   3 fixed window, 4 sliding window, 5 sliding log: a = window ns, b = limit
--   6 to 10: the same algorithms (6 token bucket ... 10 sliding log) for a
--   limit longer than 100 days, which decides in whole microseconds: as at
--   the time truncated to the microsecond, with a bucket's stored time
--   rounded up to one.
--          The requests, to the end: per request its cost (uint64, at most
--          core.MaxCost, 2^50), a count (uint32) and its number of buckets
--          (uint32), then per bucket the index of its key in KEYS and of
--          its limit (uint32 each, from 1). A count above 1 (mode "t" only,
--          cost > 0) stands for a run of that many identical requests, one
--          after another.
-- ARGV[2…] in mode "r", two per bucket in order: the value its take wrote
--          and the value before it, from mode "u"
-- One argument holds what every call sends: Redis makes a Lua string and
-- grows the ARGV table for each argument, at a cost per call.
--
-- Modes "l" (lease) and "g" (give back) decide one token bucket, KEYS[1],
-- under limit 1 (no requests): ARGV[2] is a count of tokens as a decimal
-- string, and in mode "l" ARGV[3] the lease's size; see their code below.
--
-- Returns a binary string: the time used (int64 seconds, int32
-- nanoseconds), then per request and bucket a code (one byte: 0 allowed, 1
-- limited, 2 cost above the limit) and three int64, remaining, reset ns and
-- wait ns (the delay when allowed, the retry when denied); all
-- little-endian. A run is answered request by request, or, when the fast
-- path decides it, by one record per bucket: the code 3, the bucket's debt
-- (TAT minus the time used, >= 0) before the run, the number of its
-- requests admitted, and 0. Mode "u" returns an array instead, of that
-- string and the undo array: two values per record, for a run answered at
-- once the bucket's value before the run and the last value the run wrote
-- ("" when it admitted none). A bare string costs Redis less to reply with
-- than an array holding it.
--
-- Within one call each key is read once (GET; the fast path reads several
-- with one MGET) and written once at the end (SET with PX): a request
-- decides on the state the requests before it in the call left, held in a
-- Lua table meanwhile, as if each had written it.
-- Mode "r" reads and writes directly, refunds being rare.
--
-- Values (little-endian, see Encode in Go): a tag byte, the algorithm 1 to
-- 5, then
--   token bucket, shaping  TAT s int64, TAT ns int32, fill time ns int64
--   fixed window           start s int64, start ns int32, count int64, window ns int64
--   sliding window         start s int64, start ns int32, current int64, previous int64, window ns int64
--   sliding log            window ns int64, then per entry: s int64, ns int32, cost int64
-- The fill time or window records the limit a value was written under
-- (core's State.Span). A value of another algorithm, or one that is not in
-- this format, counts as absent: a new bucket, as core's memory store
-- starts afresh under another algorithm. A window value of another window
-- starts afresh. A bucket value of another fill time keeps its share of the
-- burst: its debt counts as ceil(debt*tau'/tau) rounded up to the
-- microsecond (see decide_bucket).
--
-- Precision: Lua numbers are doubles. An absolute time (~1.8e18 ns) does not
-- fit in 53 bits, so times are kept as (seconds, nanoseconds) pairs and only
-- differences are ever formed: below 2^53 ns at nanosecond resolution (every
-- span is at most 100 days there), whole microseconds below 2^56 ns at
-- microsecond resolution (spans up to 400 days), both held exactly. A
-- bucket's debt beyond that (an explicit time stepped back by days) is
-- reported rounded up to the next double, as core does (upDouble).
-- Floating-point results (the sliding window's estimate, a rescaled debt)
-- are computed in the same order of operations as core. Every integer packed
-- is one a double holds exactly, and struct converts it exactly.

-- fast:begin
-- The common call first, kept small so that Redis runs little code for
-- it: modes "t" and "u" on token buckets and shaping limits of at most 100
-- days (limit codes 1 and 2). fast decides it as the rest of this script
-- would, with the same values and reply, but for runs, which it answers in
-- one record (and in mode "u" one pair of undo values) per bucket that
-- stands for the rest's (a test compares the two on random calls), and
-- returns nil, having written nothing, for whatever it leaves to the rest:
-- another mode or limit code, malformed arguments, a bucket
-- written under another fill time (a limit change, which rescales), a
-- bucket 2^53 ns or more ahead of the time used. The definitions below it
-- then run, only then.
--
-- Much of what a call costs Redis is what it allocates and the garbage
-- collection that follows: fast makes no closure, keeps every key's state
-- and every limit in one table each, made at its full size at once (a
-- table grown entry by entry is rebuilt at every power of two), makes the
-- reply's table at the least size it can need, and makes the tables only
-- mode "u" and requests of several buckets need only for them.
--
-- The state of the key at index k in KEYS is st[5k-4] to st[5k]: the
-- algorithm of its value (0 before it is read; false for none, or not a
-- token bucket or shaping value: a new bucket), its TAT (seconds,
-- nanoseconds), the fill time it was written under, and the time to live
-- to write it with, in ns (0 while it is not to be written).
local function fast()
  -- Its own names for what it uses: capturing none of the chunk's locals,
  -- it has no upvalue to make and close.
  local E9, TWO53 = 1000000000, 9007199254740992
  local pack, sunpack, fmod = struct.pack, struct.unpack, math.fmod
  local byte, rep, concat, format = string.byte, string.rep, table.concat, string.format
  -- Remainders: for integers a >= 0 and b >= 1 with a + b below 2^53,
  -- Lua's a % b, a - floor(a / b) * b, is a mod b or, when a / b rounded
  -- up to the next integer, that minus b; either is exact, and the one
  -- correction makes it a mod b. An operator costs less than a call of
  -- math.fmod.
  local blob = ARGV[1]
  local size = #blob
  if size < 25 then return nil end
  local mode, now_s, now_ns, min_ttl, nl, pos = sunpack('<Bi8I4i8I4', blob)
  local umode = mode == 117 -- "u"
  if mode ~= 116 and not umode then return nil end -- nor "t"
  if now_s == -1 then
    local t = redis.call('TIME')
    now_s, now_ns = tonumber(t[1]), tonumber(t[2]) * 1000
  elseif now_s < 0 or now_ns >= E9 then
    return nil
  end
  if min_ttl < 0 then return nil end

  -- The limits, five doubles each from lim[5j-4]: code, a, b, c, d. An
  -- interval (a) below 1 ns is no limit core makes: like any input fast
  -- was not written for, it is left to the rest.
  if nl > 1000 or pos + 40 * nl - 1 > size then return nil end
  local lf = '<ddddd'
  if nl ~= 1 then lf = '<' .. rep('d', 5 * nl) end
  local lim = { sunpack(lf, blob, pos) }
  pos = pos + 40 * nl
  for j = 5, 5 * nl, 5 do
    local code = lim[j - 4]
    if (code ~= 1 and code ~= 2) or not (lim[j - 3] >= 1) then return nil end
  end

  local nk = #KEYS
  if nk > 1000 then return nil end
  -- The reply's fields, four per bucket: a request of m buckets takes 16 +
  -- 8m bytes, so the requests' n bytes hold at least n / 24 buckets (as
  -- many when each request has one).
  local nout = (size - pos + 1) / 6
  nout = nout - nout % 1
  if nout > 5000 then return nil end
  local zero = rep('\0', nout < 5 * nk and 5 * nk or nout)
  local st, out = { byte(zero, 1, 5 * nk) }, { byte(zero, 1, nout) }
  nout = 0
  local kraw, undo, nundo -- mode "u": each key's value as it stands ('' for none); the undo values
  if umode then kraw, undo, nundo = {}, {}, 0 end
  -- Per bucket i of a request of several, bt[5i-4] to bt[5i]: its key
  -- and limit index, its debt, and, in a single request, its debt once it
  -- takes (false: it takes nothing) and its room; one table, made at its
  -- size (for btn buckets) as the others are.
  local bt, btn = nil, 0
  -- Every key is read at its first request; several are read at the start
  -- with one MGET instead (false for none), a command costing Redis far
  -- more than a key in it.
  local vals
  if nk > 1 then vals = redis.call('MGET', unpack(KEYS)) end
  while pos <= size do
    if pos + 15 > size then return nil end
    -- A request and its first bucket in one unpack when it has one: a
    -- call of a C function costs Redis more than a few more fields.
    local cost, count, m, k0, j0
    if pos + 23 <= size then
      cost, count, m, k0, j0 = sunpack('<i8I4I4I4I4', blob, pos)
    else
      cost, count, m = sunpack('<i8I4I4', blob, pos)
    end
    pos = pos + 16
    if cost < 0 or cost >= TWO53 or pos + 8 * m - 1 > size then return nil end
    local run = count ~= 1
    if run and (count < 2 or cost == 0 or m == 0) then return nil end
    if m > 1 and m > btn then
      if m > 1000 then return nil end
      local z = zero
      if #z < 5 * m then z = rep('\0', 5 * m) end
      bt, btn = { byte(z, 1, 5 * m) }, m
    end
    -- A run of count identical requests of cost > 0 is decided at once:
    -- at one time, each admitted request adds need to every bucket's
    -- debt, and once one is denied every later one is, nothing having
    -- changed. A request at debt raw passes a bucket while raw <= tau -
    -- need (+ max wait when shaping), so the first margin / need + 1
    -- pass, margin the room at the run's start (exact: see Remainders
    -- at the top of fast). Each bucket's record is the
    -- code 3, its debt at the run's start and the number admitted; the
    -- client derives every request's state from them
    -- (redisscript.Builder).
    local adm = count
    local allowed = true
    local base = nundo
    -- A request of one bucket keeps it in these.
    local k1, j1, raw1, d1
    for i = 1, m do
      -- The bucket: its key and limit, and its debt at the time used (0
      -- for no value or another algorithm's).
      local k, j = k0, j0
      if i > 1 then k, j = sunpack('<I4I4', blob, pos) end
      pos = pos + 8
      if j < 1 or j > nl then return nil end
      local l = 5 * j
      local alg = lim[l - 4]
      local b = 5 * k
      local kal = st[b - 4]
      if kal == 0 then
        kal = false
        local v
        if vals then v = vals[k] else v = redis.call('GET', KEYS[k]) end
        if v and #v == 21 then
          local tag = byte(v, 1)
          if tag == 1 or tag == 2 then
            kal = tag
            st[b - 3], st[b - 2], st[b - 1] = sunpack('<i8i4i8', v, 2)
          end
        end
        st[b - 4] = kal
        if umode then kraw[k] = v or '' end
      elseif kal == nil then
        return nil -- an index past KEYS
      end
      local interval, tau = lim[l - 3], lim[l - 2]
      local raw = 0
      if kal == alg then
        local span = st[b - 1]
        if span > 0 and span ~= tau then return nil end
        raw = (st[b - 3] - now_s) * E9 + (st[b - 2] - now_ns)
        if raw < 0 then
          raw = 0
        elseif raw >= TWO53 then
          return nil
        end
      end
      local need = cost * interval
      local d = false
      if run then
        local margin = -1
        if cost <= lim[l - 1] then
          margin = tau - need - raw
          if alg == 2 then margin = margin + lim[l] end
        end
        if margin < 0 then
          adm = 0
        elseif margin >= TWO53 then
          return nil
        else
          local r = margin % need
          if r < 0 then r = r + need end
          local cap = (margin - r) / need + 1
          if cap < adm then adm = cap end
        end
      else
        if umode then
          -- The bucket's value before the request and, set below if the
          -- request writes it, after.
          undo[nundo + 1], undo[nundo + 2] = kraw[k], ''
          nundo = nundo + 2
        end
        local room = tau - raw
        local roompos = room
        if roompos < 0 then roompos = 0 end
        local wait = need - room
        local reason, left, reset, w = 0, roompos, raw, 0
        if cost > lim[l - 1] then
          reason, allowed = 2, false
        elseif cost > 0 then
          if wait <= 0 or (alg == 2 and wait <= lim[l]) then
            if wait > 0 then w = wait end
            left = room - need
            if left < 0 then left = 0 end
            d = raw + need
            reset = d
          else
            if alg == 2 then wait = wait - lim[l] end
            reason, w, allowed = 1, wait, false
          end
        end
        if m > 1 then bt[5 * i] = roompos end
        local r = left % interval
        if r < 0 then r = r + interval end
        out[nout + 1], out[nout + 2], out[nout + 3], out[nout + 4] = reason, (left - r) / interval, reset, w
        nout = nout + 4
      end
      if m == 1 then
        k1, j1, raw1, d1 = k, j, raw, d
      else
        local o = 5 * i
        bt[o - 4], bt[o - 3], bt[o - 2] = k, j, raw
        if not run then bt[o - 1] = d end
      end
    end
    if run then
      -- Each bucket's record and, in mode "u", its value before the run
      -- and the last the run wrote, set below if it wrote one: the client
      -- derives each request's pair from them.
      for i = 1, m do
        local k, raw = k1, raw1
        if m > 1 then k, raw = bt[5 * i - 4], bt[5 * i - 2] end
        out[nout + 1], out[nout + 2], out[nout + 3], out[nout + 4] = 3, raw, adm, 0
        nout = nout + 4
        if umode then
          undo[nundo + 1], undo[nundo + 2] = kraw[k], ''
          nundo = nundo + 2
        end
      end
    end
    if (run and adm > 0) or (not run and allowed) then
      -- The buckets that take get their new state: the TAT the time used
      -- plus their new debt d, to live d rounded up so that the TAT is a
      -- whole microsecond.
      for i = 1, m do
        local k, j, raw, d = k1, j1, raw1, d1
        if m > 1 then
          local o = 5 * i
          k, j, raw = bt[o - 4], bt[o - 3], bt[o - 2]
        end
        local l = 5 * j
        if run then
          d = raw + adm * (cost * lim[l - 3])
        elseif m > 1 then
          d = bt[5 * i - 1]
        end
        if d then
          if d >= TWO53 then return nil end
          local r = d % E9
          if r < 0 then r = r + E9 end
          local s, ns = now_s + (d - r) / E9, now_ns + r
          if ns >= E9 then s, ns = s + 1, ns - E9 end
          r = ns % 1000
          if r < 0 then r = r + 1000 end
          local ttl = d
          if r > 0 then ttl = d + 1000 - r end
          local b = 5 * k
          st[b - 4], st[b - 3], st[b - 2], st[b - 1], st[b] = lim[l - 4], s, ns, lim[l - 2], ttl
          if umode then
            local v = pack('<Bi8i4i8', lim[l - 4], s, ns, lim[l - 2])
            kraw[k] = v
            undo[base + 2 * i] = v
          end
        end
      end
    elseif not run and m > 1 then
      -- Nothing is consumed: an allowing bucket reports its balance as it
      -- stands, as a read of cost 0.
      local o = nout - 4 * m
      for i = 1, m do
        if out[o + 1] == 0 then
          local b = 5 * i
          local roompos, interval = bt[b], lim[5 * bt[b - 3] - 3]
          out[o + 2], out[o + 3], out[o + 4] = (roompos - fmod(roompos, interval)) / interval, bt[b - 2], 0
        end
        o = o + 4
      end
    end
  end

  for k = 1, nk do
    local b = 5 * k
    local ttl = st[b]
    if ttl > 0 then
      ttl = ttl + 999999
      local r = ttl % 1000000
      if r < 0 then r = r + 1000000 end
      local ms = (ttl - r) / 1000000
      if ms < min_ttl then ms = min_ttl end
      redis.call('SET', KEYS[k], pack('<Bi8i4i8', st[b - 4], st[b - 3], st[b - 2], st[b - 1]), 'PX', format('%d', ms))
    end
  end

  -- The reply, packed sixteen records at a time.
  local nrec = nout / 4
  if nrec <= 16 then
    local f = '<i8i4Bi8i8i8' -- a literal costs no string to make
    if nrec ~= 1 then f = '<i8i4' .. rep('Bi8i8i8', nrec) end
    local r = pack(f, now_s, now_ns, unpack(out, 1, nout))
    if umode then return { r, undo } end
    return r
  end
  local parts = { pack('<i8i4', now_s, now_ns) }
  local f16 = '<Bi8i8i8Bi8i8i8Bi8i8i8Bi8i8i8Bi8i8i8Bi8i8i8Bi8i8i8Bi8i8i8Bi8i8i8Bi8i8i8Bi8i8i8Bi8i8i8Bi8i8i8Bi8i8i8Bi8i8i8Bi8i8i8'
  for x = 0, nout - 1, 64 do
    if nout - x >= 64 then
      parts[#parts + 1] = pack(f16, unpack(out, x + 1, x + 64))
    else
      parts[#parts + 1] = pack('<' .. rep('Bi8i8i8', (nout - x) / 4), unpack(out, x + 1, nout))
    end
  end
  if umode then return { concat(parts), undo } end
  return concat(parts)
end
-- fast:call
do
  local r = fast()
  if r then return r end
end
-- fast:end

local E9 = 1000000000
local TWO53 = 9007199254740992
local pack, sunpack = struct.pack, struct.unpack
local fmod, floor, ceil, frexp = math.fmod, math.floor, math.ceil, math.frexp
local byte, rep, concat = string.byte, string.rep, table.concat


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
    local _, e = frexp(r)
    r = r + 2 ^ (e - 53)
  end
  return r
end

-- t + d, d an integer ns that a double holds: exact (fmod is exact, and so
-- is the quotient of the multiple of E9 it leaves).
local function add(s, ns, d)
  local r = fmod(d, E9)
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
  local r = fmod(ns, 1000)
  if r > 0 then
    ns = ns + 1000 - r
    if ns >= E9 then return s + 1, ns - E9 end
  end
  return s, ns
end

-- floor(a / b) for integers a >= 0, b > 0: fmod is exact, so is the quotient.
local function idiv(a, b) return (a - fmod(a, b)) / b end

local function later(as, ans, bs, bns) return as > bs or (as == bs and ans > bns) end

-- The call's header (see the top), the limits after it, then the requests
-- from pos0.
local call = ARGV[1] or ''
if #call < 25 then return redis.error_reply('ERR ratelimit: bad arguments') end
local mcode, now_s, now_ns, min_ttl, nlim, pos0 = sunpack('<Bi8I4i8I4', call)
if now_s == -1 then
  local t = redis.call('TIME')
  now_s, now_ns = tonumber(t[1]), tonumber(t[2]) * 1000
elseif now_s < 0 or now_ns >= E9 then
  return redis.error_reply('ERR ratelimit: bad time')
end
local mode = string.char(mcode)
local cost = 0 -- the cost of the request being decided

-- The limits, by index.
local lalg, llong, la, lb, lc, ld = {}, {}, {}, {}, {}, {}
if pos0 + 40 * nlim - 1 > #call then return redis.error_reply('ERR ratelimit: bad limit arguments') end
for j = 1, nlim do
  local code, a, b, c, d = sunpack('<ddddd', call, pos0)
  pos0 = pos0 + 40
  if code < 1 or code > 10 or code ~= floor(code) then
    return redis.error_reply('ERR ratelimit: bad arguments for limit ' .. j)
  end
  if code > 5 then lalg[j], llong[j] = code - 5, true else lalg[j], llong[j] = code, false end
  la[j], lb[j], lc[j], ld[j] = a, b, c, d
end

-- Values: decoded states are arrays whose first element is the algorithm.
local function decode(v)
  if not v then return false end
  local n = #v
  if n < 9 then return false end
  local tag = byte(v, 1)
  if tag == 1 or tag == 2 then
    if n ~= 21 then return false end
    local s, ns, span = sunpack('<i8i4i8', v, 2)
    return { tag, s, ns, span }
  elseif tag == 3 then
    if n ~= 29 then return false end
    local s, ns, count, w = sunpack('<i8i4i8i8', v, 2)
    return { 3, s, ns, count, w }
  elseif tag == 4 then
    if n ~= 37 then return false end
    local s, ns, cur, prev, w = sunpack('<i8i4i8i8i8', v, 2)
    return { 4, s, ns, cur, prev, w }
  elseif tag == 5 then
    if (n - 9) % 20 ~= 0 then return false end
    local w = sunpack('<i8', v, 2)
    local entries = {}
    for k = 1, (n - 9) / 20 do
      local s, ns, c = sunpack('<i8i4i8', v, 20 * k - 10)
      entries[k] = { s, ns, c }
    end
    return { 5, w, entries }
  end
  return false
end

local function encode(st)
  local tag = st[1]
  if tag <= 2 then return pack('<Bi8i4i8', tag, st[2], st[3], st[4]) end
  if tag == 3 then return pack('<Bi8i4i8i8', 3, st[2], st[3], st[4], st[5]) end
  if tag == 4 then return pack('<Bi8i4i8i8i8', 4, st[2], st[3], st[4], st[5], st[6]) end
  local parts = { pack('<Bi8', 5, st[2]) }
  local entries = st[3]
  for k = 1, #entries do
    local e = entries[k]
    parts[k + 1] = pack('<i8i4i8', e[1], e[2], e[3])
  end
  return concat(parts)
end

-- The epoch-aligned start of the window of size w ns (a whole number of ms)
-- holding now, as a pair.
local function window_start(w)
  local wms = w / 1000000
  local now_ms = now_s * 1000 + idiv(now_ns, 1000000)
  local start_ms = idiv(now_ms, wms) * wms
  return idiv(start_ms, 1000), fmod(start_ms, 1000) * 1000000
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
local function floor_pos(x) if x <= 0 then return 0 end return floor(x) end

-- core's rescaleDebt: the debt under a fill time of to of a bucket whose
-- debt is debt > 0 (whole microseconds) under a fill time of from.
local function rescale(debt, from, to)
  local q = ceil(debt * to / from)
  if q >= to then return to end
  q = q + fmod(1000 - fmod(q, 1000), 1000)
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

-- Each decide takes a bucket's state (false: none) and returns the bucket's
-- answer, allowed (0/1), reason, remaining, reset ns and wait ns (the delay
-- when allowed, the retry when denied), and, when the bucket would change,
-- its next state and the time to live of that state in ns. A token bucket's
-- next state is its TAT, left in next_s and next_ns (the next state
-- returned is then true), so that a take allocates no table.
local next_s, next_ns

-- a - b rounded up to the microsecond, exactly, for a > b less than 2^56
-- ns apart: (as - bs) * E9 is a whole number of microseconds.
local function diff_up_us(as, ans, bs, bns)
  local d = ans - bns
  return (as - bs) * E9 + d + fmod(1000 - fmod(d, 1000), 1000)
end

-- core's gcraSpan. now is the limit's (truncated to the microsecond at that
-- resolution). The time until full (the debt) is the stored TAT less now. A
-- value written under another fill time keeps its share: its debt is that
-- time rounded up to the microsecond, rescaled, and falls at the writer's
-- pace until a take here writes.
local function decide_bucket(st, alg, long, interval, tau, burst, maxwait)
  local raw, debt = 0, 0
  local span, changed = 0, false
  local ts, tns
  if st then
    span = st[4]
    changed = span > 0 and span ~= tau
    ts, tns = st[2], st[3]
    if long then ts, tns = ceil_us(ts, tns) end
    raw = (ts - now_s) * E9 + (tns - now_ns) -- diff, inlined
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
    if cost > burst then return 0, 2, idiv(roompos, interval), reset, 0 end
    return 1, 0, idiv(roompos, interval), reset, 0
  end
  if wait <= 0 or (alg == 2 and wait <= maxwait) then
    local delay = 0
    if wait > 0 then delay = wait end
    local left = room - need
    if left < 0 then left = 0 end
    -- The TAT, now + debt + need: add and idiv, inlined on this path,
    -- which every admitted take runs.
    local d = debt + need
    local r = fmod(d, E9)
    local s, ns = now_s + (d - r) / E9, now_ns + r
    if ns >= E9 then s, ns = s + 1, ns - E9 end
    -- Live until the TAT rounded up to the microsecond: full then under
    -- any limit.
    local ttl = d
    r = fmod(ns, 1000)
    if r > 0 then ttl = ttl + 1000 - r end
    next_s, next_ns = s, ns
    return 1, 0, (left - fmod(left, interval)) / interval, d, delay, true, ttl
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
  return 0, 1, idiv(roompos, interval), reset, retry
end

local function decide_fixed(st, w, limit)
  local ss, sns = window_start(w)
  local count = 0
  if st and st[5] == w then
    local as, ans = st[2], st[3]
    if later(as, ans, ss, sns) then ss, sns = as, ans end
    if as == ss and ans == sns then count = st[4] end
  end
  local to_end = diff(ss, sns, now_s, now_ns) + w
  local reset = 0
  if count > 0 then reset = to_end end
  local rem = limit - count
  if rem < 0 then rem = 0 end
  if cost == 0 then return 1, 0, rem, reset, 0 end
  if cost > limit then return 0, 2, rem, reset, 0 end
  if count + cost <= limit then
    return 1, 0, limit - count - cost, to_end, 0, { 3, ss, sns, count + cost, w }, to_end
  end
  return 0, 1, rem, reset, to_end
end

local function decide_sliding(st, w, limit, long)
  local ss, sns = window_start(w)
  local cur, prev = 0, 0
  if st and st[6] == w then
    local as, ans = st[2], st[3]
    if later(as, ans, ss, sns) then ss, sns = as, ans end
    local gap = diff(ss, sns, as, ans)
    if gap == 0 then
      cur, prev = st[4], st[5]
    elseif gap == w then
      prev = st[4]
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
  if cost == 0 then return 1, 0, floor_pos(limit - est), reset_after(cur, prev), 0 end
  if cost > limit then return 0, 2, floor_pos(limit - est), reset_after(cur, prev), 0 end
  if fits(prev, cur, w, elapsed, cost, limit) then
    local reset = reset_after(cur + cost, prev)
    return 1, 0, floor_pos(limit - estimate(prev, cur + cost, w, elapsed)), reset, 0,
      { 4, ss, sns, cur + cost, prev, w }, reset
  end
  local unit = 1
  if long then unit = 1000 end
  local retry
  if cur + cost <= limit then
    retry = first_fit(elapsed, w, unit, prev, cur, w, cost, limit) - since
  else
    retry = w - since + first_fit(0, w, unit, cur, 0, w, cost, limit)
  end
  return 0, 1, floor_pos(limit - est), reset_after(cur, prev), retry
end

-- A sliding log's entries are in time order. The next state is a new table:
-- the cached one stays as it was until the request as a whole is allowed.
local function decide_log(st, w, limit)
  local live = {}
  local sum = 0
  if st and st[2] == w then
    local entries = st[3]
    for k = 1, #entries do
      local e = entries[k]
      if diff(e[1], e[2], now_s, now_ns) + w > 0 then
        live[#live + 1] = e
        sum = sum + e[3]
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
  if cost == 0 then return 1, 0, rem, reset, 0 end
  if cost > limit then return 0, 2, rem, reset, 0 end
  if sum + cost <= limit then
    local as, ans = now_s, now_ns
    if n > 0 and later(live[n][1], live[n][2], as, ans) then as, ans = live[n][1], live[n][2] end
    if n > 0 and live[n][1] == as and live[n][2] == ans then
      live[n] = { as, ans, live[n][3] + cost }
    else
      live[n + 1] = { as, ans, cost }
    end
    local ttl = diff(as, ans, now_s, now_ns) + w
    return 1, 0, limit - sum - cost, ttl, 0, { 5, w, live }, ttl
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
  return 0, 1, rem, reset, retry
end

-- PX has millisecond resolution: round up, so a key never expires before
-- its bucket is full again. A longer life never changes a decision (the
-- value itself says when the bucket is full), so a floor is safe. Redis
-- formats a number argument with 17 significant digits: a whole number of
-- ms below 2^53 is sent exactly.
local function px(ttl)
  local ms = idiv(ttl + 999999, 1000000)
  if ms < 1 then ms = 1 end
  if ms < min_ttl then ms = min_ttl end
  return ms
end

-- Decides one bucket under limit j; a limit longer than 100 days at the
-- time truncated to the microsecond.
local function decide(st, j)
  local alg, long = lalg[j], llong[j]
  if st and st[1] ~= alg then st = false end
  if not long then
    if alg <= 2 then return decide_bucket(st, alg, false, la[j], lb[j], lc[j], ld[j]) end
    if alg == 3 then return decide_fixed(st, la[j], lb[j]) end
    if alg == 4 then return decide_sliding(st, la[j], lb[j], false) end
    return decide_log(st, la[j], lb[j])
  end
  local saved = now_ns
  now_ns = now_ns - fmod(now_ns, 1000)
  local ok, reason, rem, reset, wait, nx, ttl
  if alg <= 2 then
    ok, reason, rem, reset, wait, nx, ttl = decide_bucket(st, alg, true, la[j], lb[j], lc[j], ld[j])
  elseif alg == 3 then
    ok, reason, rem, reset, wait, nx, ttl = decide_fixed(st, la[j], lb[j])
  elseif alg == 4 then
    ok, reason, rem, reset, wait, nx, ttl = decide_sliding(st, la[j], lb[j], true)
  else
    ok, reason, rem, reset, wait, nx, ttl = decide_log(st, la[j], lb[j])
  end
  now_ns = saved
  return ok, reason, rem, reset, wait, nx, ttl
end

-- The state of each key read or written in this call (false: absent), and
-- in mode "u" its value as stored or to be stored ('' when absent).
local states, values = {}, {}
local undo_mode = mode == 'u'
local function load(key)
  local st = states[key]
  if st == nil then
    local v = redis.call('GET', key)
    st = decode(v)
    states[key] = st
    if undo_mode then values[key] = v or '' end
  end
  return st
end

-- Gives back cost to a bucket that an earlier take at now consumed. If the
-- bucket still holds what that take wrote, its value before the take comes
-- back exactly (as if the take never happened); if another take wrote it
-- since, cost is given back arithmetically, never more than was taken: not
-- at all if that take was under another fill time or window, whose value
-- does not hold ours.
local function refund(key, j, written, before)
  states[key] = nil -- read again when reported
  local v = redis.call('GET', key)
  if written ~= '' and v == written then
    if before == '' then redis.call('DEL', key) else redis.call('SET', key, before, 'KEEPTTL') end
    return
  end
  local alg, long, a, b = lalg[j], llong[j], la[j], lb[j]
  local st = decode(v)
  if not st or st[1] ~= alg then return end
  if alg <= 2 then
    if st[4] ~= b then return end
    local s, ns = add(st[2], st[3], -cost * a)
    local left = diff(s, ns, now_s, now_ns)
    if left <= 0 then
      redis.call('DEL', key)
    else
      redis.call('SET', key, encode({ alg, s, ns, b }), 'PX', px(left))
    end
  elseif alg <= 4 then
    if st[alg + 2] ~= a then return end
    local ss, sns = window_start(a)
    if st[2] == ss and st[3] == sns then
      local count = st[4] - cost
      if count < 0 then count = 0 end
      st[4] = count
      redis.call('SET', key, encode(st), 'KEEPTTL')
    end
  else
    if st[2] ~= a then return end
    local mns = now_ns
    if long then mns = mns - fmod(mns, 1000) end
    local entries, kept, done = st[3], {}, false
    for k = 1, #entries do
      local e = entries[k]
      if not done and e[1] == now_s and e[2] == mns then
        done = true
        if e[3] > cost then kept[#kept + 1] = { e[1], e[2], e[3] - cost } end
      else
        kept[#kept + 1] = e
      end
    end
    if #kept == 0 then
      redis.call('DEL', key)
    else
      redis.call('SET', key, encode({ 5, a, kept }), 'KEEPTTL')
    end
  end
end

-- Mode "l" leases tokens from the token bucket KEYS[1] under limit 1: if
-- it holds at least ARGV[2] tokens (need), it takes as many as it holds, up
-- to ARGV[3] (size), and writes as a take of that many does; otherwise it
-- takes nothing and answers as a denied take of need. Mode "g" gives
-- ARGV[2] tokens back to KEYS[1]: its TAT moves back by that many
-- intervals, never before now (a bucket is never fuller than full); a value
-- written under another fill time is first rescaled as a take here would
-- see it. Either replies with the time, then the bucket's record (mode
-- "l": after the grant; mode "g": as it stands after the return), and in
-- mode "l" the tokens granted (int64).
if mode == 'l' or mode == 'g' then
  local key = KEYS[1]
  local n = tonumber(ARGV[2])
  if not key or lalg[1] ~= 1 or not n or n < 1 or n ~= floor(n) then
    return redis.error_reply('ERR ratelimit: bad lease arguments')
  end
  local st = load(key)
  if st and st[1] ~= 1 then st = false end
  if mode == 'l' then
    local size = tonumber(ARGV[3])
    if not size or size < n or size ~= floor(size) then
      return redis.error_reply('ERR ratelimit: bad lease size')
    end
    cost = n
    local ok, reason, rem, reset, wait = decide(st, 1)
    local granted = 0
    if ok == 1 then
      cost = 0
      local _, _, avail = decide(st, 1)
      granted = avail
      if granted > size then granted = size end
      cost = granted
      local nx, ttl
      ok, reason, rem, reset, wait, nx, ttl = decide(st, 1)
      redis.call('SET', key, pack('<Bi8i4i8', 1, next_s, next_ns, lb[1]), 'PX', px(ttl))
    end
    return pack('<i8i4Bi8i8i8i8', now_s, now_ns, reason, rem, reset, wait, granted)
  end
  if n > lc[1] then n = lc[1] end -- never more than a burst
  if st then
    local long, interval, tau = llong[1], la[1], lb[1]
    local saved = now_ns
    if long then now_ns = now_ns - fmod(now_ns, 1000) end
    local ts, tns = st[2], st[3]
    if long then ts, tns = ceil_us(ts, tns) end
    if diff(ts, tns, now_s, now_ns) > 0 then
      local span = st[4]
      if span > 0 and span ~= tau then
        ts, tns = add(now_s, now_ns, rescale(diff_up_us(ts, tns, now_s, now_ns), span, tau))
      end
      local s, ns = add(ts, tns, -n * interval)
      local left = diff(s, ns, now_s, now_ns)
      if left <= 0 then
        redis.call('DEL', key)
        st = false
      else
        redis.call('SET', key, pack('<Bi8i4i8', 1, s, ns, tau), 'PX', px(left))
        st = { 1, s, ns, tau }
      end
    end
    now_ns = saved
  end
  cost = 0
  local _, reason, rem, reset, wait = decide(st, 1)
  return pack('<i8i4Bi8i8i8', now_s, now_ns, reason, rem, reset, wait)
end

-- The reply's fields, four per bucket, packed at the end: one struct.pack
-- call per up to 200 buckets costs less than one per bucket.
local out, nout = {}, 0
local undo = {}
local written = {} -- key -> time to live of the state to write, ns
local order = {}   -- written keys, in the order first written
local keys, lims, oks, nexts, ttls, tats, tatns, before, after = {}, {}, {}, {}, {}, {}, {}, {}, {}
local blob = call
local pos, size, argi = pos0, #call, 2
while pos <= size do
  if pos + 15 > size then return redis.error_reply('ERR ratelimit: bad request arguments') end
  local c1, c2, c3, c4, c5, c6, c7, c8, n1, n2, n3, n4, m1, m2, m3, m4 = byte(blob, pos, pos + 15)
  pos = pos + 16
  if c8 ~= 0 then return redis.error_reply('ERR ratelimit: bad cost') end
  cost = c1 + 256 * (c2 + 256 * (c3 + 256 * (c4 + 256 * (c5 + 256 * (c6 + 256 * c7)))))
  local count = n1 + 256 * (n2 + 256 * (n3 + 256 * n4))
  local m = m1 + 256 * (m2 + 256 * (m3 + 256 * m4))
  if pos + 8 * m - 1 > size then return redis.error_reply('ERR ratelimit: bad request arguments') end
  if count < 1 or (count > 1 and mode == 'r') then return redis.error_reply('ERR ratelimit: bad request count') end
  for i = 1, m do
    local k1, k2, k3, k4, j1, j2, j3, j4 = byte(blob, pos, pos + 7)
    pos = pos + 8
    local key, j = KEYS[k1 + 256 * (k2 + 256 * (k3 + 256 * k4))], j1 + 256 * (j2 + 256 * (j3 + 256 * j4))
    if not key or not lalg[j] then
      return redis.error_reply('ERR ratelimit: bad arguments for bucket ' .. i)
    end
    keys[i], lims[i] = key, j
    if mode == 'r' then
      refund(key, j, ARGV[argi] or '', ARGV[argi + 1] or '')
      argi = argi + 2
    end
  end
  if mode == 'r' then cost = 0 end -- then report each bucket as it stands
  -- A run of count identical requests (mode "t") is decided one request
  -- after another.
  for _ = 1, count do
    if undo_mode then
      for i = 1, m do
        load(keys[i])
        before[i] = values[keys[i]]
      end
    end
    local allowed = true
    local base = nout
    for i = 1, m do
      local key, j = keys[i], lims[i]
      local st = states[key]
      if st == nil then st = load(key) end
      local ok, reason, rem, reset, wait, nx, ttl
      local alg = lalg[j]
      if alg <= 2 and not llong[j] then
        if st and st[1] ~= alg then st = false end
        ok, reason, rem, reset, wait, nx, ttl = decide_bucket(st, alg, false, la[j], lb[j], lc[j], ld[j])
      else
        ok, reason, rem, reset, wait, nx, ttl = decide(st, j)
      end
      if ok == 0 then allowed = false end
      oks[i], nexts[i], ttls[i] = ok, nx, ttl
      if nx == true then tats[i], tatns[i] = next_s, next_ns end
      out[nout + 1], out[nout + 2], out[nout + 3], out[nout + 4] = reason, rem, reset, wait
      nout = nout + 4
    end
    if allowed and cost > 0 then
      for i = 1, m do
        local key, nx = keys[i], nexts[i]
        after[i] = ''
        if nx then
          if nx == true then
            -- A token bucket's state is updated in place, or made once.
            local j = lims[i]
            local st = states[key]
            if st and st[1] == lalg[j] then
              st[2], st[3], st[4] = tats[i], tatns[i], lb[j]
            else
              states[key] = { lalg[j], tats[i], tatns[i], lb[j] }
            end
          else
            states[key] = nx
          end
          if not written[key] then order[#order + 1] = key end
          written[key] = ttls[i]
          if undo_mode then
            after[i] = encode(states[key])
            values[key] = after[i]
          end
        end
      end
    else
      if not allowed then
        -- Nothing is consumed: report each allowing bucket's balance as it
        -- stands, reading with cost 0.
        local saved = cost
        cost = 0
        for i = 1, m do
          if oks[i] == 1 then
            local _, reason, rem, reset = decide(load(keys[i]), lims[i])
            local o = base + 4 * (i - 1)
            out[o + 1], out[o + 2], out[o + 3], out[o + 4] = reason, rem, reset, 0
          end
        end
        cost = saved
      end
      for i = 1, m do after[i] = '' end
    end
    if undo_mode then
      for i = 1, m do
        undo[#undo + 1] = before[i]
        undo[#undo + 1] = after[i]
      end
    end
  end
end
for k = 1, #order do
  local key = order[k]
  local v = values[key]
  if not undo_mode then v = encode(states[key]) end
  redis.call('SET', key, v, 'PX', px(written[key]))
end
local parts = { pack('<i8i4', now_s, now_ns) }
local chunk = 200
local full = '<' .. rep('Bi8i8i8', chunk)
for k = 0, nout - 1, 4 * chunk do
  local n = (nout - k) / 4
  if n >= chunk then
    parts[#parts + 1] = pack(full, unpack(out, k + 1, k + 4 * chunk))
  else
    parts[#parts + 1] = pack('<' .. rep('Bi8i8i8', n), unpack(out, k + 1, nout))
  end
end
if undo_mode then return { concat(parts), undo } end
return concat(parts)
