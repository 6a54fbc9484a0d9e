-- One round trip for a fastText batch: every word's row, and the n-gram bucket rows of
-- only those words that are missing (as MGET of the words then the buckets would give
-- them; a bucket no missing word needs comes back nil). Read-only (EVAL_RO); only the
-- missing words' entries are unpacked.
-- KEYS: the word keys.
-- ARGV[1]: the bucket keys' prefix (keys.ngram_key_prefix): a bucket's key is it and
--   the bucket number in decimal, as keys.ngram_keys builds them.
-- ARGV[2]: the bucket numbers (uint32, little-endian).
-- ARGV[3]: for every bucket of every word in order, its position in ARGV[2] (uint32).
-- ARGV[4]: word i's first entry in ARGV[3] (uint32, one more bound at the end).
local n, prefix, ids, flat, bounds = #KEYS, ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local out = {}
for i = 1, n + #ids / 4 do out[i] = false end
for i = 1, n do
  local v = redis.call('GET', KEYS[i])
  if v then
    out[i] = v
  else
    local lo = struct.unpack('<I4', bounds, 4 * i - 3)
    local hi = struct.unpack('<I4', bounds, 4 * i + 1)
    for k = lo, hi - 1 do
      local j = struct.unpack('<I4', flat, 4 * k + 1)
      if not out[n + j + 1] then
        out[n + j + 1] = redis.call('GET', prefix .. struct.unpack('<I4', ids, 4 * j + 1))
      end
    end
  end
end
return out
