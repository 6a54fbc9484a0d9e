-- Deletes KEYS[1] only while it holds ARGV[1] (a lease taken over from a dead holder:
-- never one another process took meanwhile). Returns how many keys it deleted.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
