-- Appends one blob to a generation's vocabulary list at a known position, idempotently:
-- pushed only when the list holds exactly the blobs before it; run again (a cluster client
-- resends a command whose reply it lost) it finds its blob already there and does nothing.
-- Returns the list's length after it, or -1 - length when the list is not what the load
-- wrote (shorter: acknowledged blobs were lost in a failover).
local n, i = redis.call('LLEN', KEYS[1]), tonumber(ARGV[1])
if n == i then return redis.call('RPUSH', KEYS[1], ARGV[2]) end
if n > i and redis.call('LINDEX', KEYS[1], i) == ARGV[2] then return i + 1 end
return -1 - n
