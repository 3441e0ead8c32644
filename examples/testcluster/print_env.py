# Prints the named environment variables of each worker, hex-encoded, so a
# test can check values arrive byte-for-byte: ENV <rank> NAME=<hex>
import os, sys
rank = os.environ.get("RANK", "?")
for name in sys.argv[1:]:
    if name in os.environ:
        print(f"ENV {rank} {name}={os.environ[name].encode().hex()}", flush=True)
