"""Take a store-level pin on model M and keep it alive:
``store_pin_holder.py REDIS_URL LEASE``; prints the pin's key, then sleeps until killed."""

import sys
import time

from vecserve.store import Store
from vecserve.store.pins import Pin

store = Store.from_url(sys.argv[1])
pin = Pin.take(store, "M", lease=float(sys.argv[2])).keep_alive()  # a daemon thread
print(pin.key, flush=True)
time.sleep(60)
