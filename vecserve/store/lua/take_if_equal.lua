-- Sets KEYS[1] to ARGV[2] for ARGV[3] seconds only while it holds ARGV[1] (a lease this
-- process released that a restarted server brought back: never one another process
-- took meanwhile). Returns 1 if it took the key, else 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
  return 1
end
return 0
