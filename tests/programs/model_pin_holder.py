"""Pin model M through RedisKeyedVectors and keep the pin alive:
``model_pin_holder.py REDIS_URL LEASE``; prints the pinned vector of "king", then sleeps
until killed."""

import sys
import time

from vecserve import RedisKeyedVectors

kv = RedisKeyedVectors("M", redis_url=sys.argv[1])
pinned = kv.pin(lease=float(sys.argv[2]))
print(pinned["king"].tolist(), flush=True)
time.sleep(60)
