#!/usr/bin/env python3
"""Do syncs hold O_DIRECT writes on this disk? Eight threads write 512 KiB blocks in
file order with O_DIRECT (as a Skein shard keeps eight appends in flight), while the
main thread calls fdatasync every 0.6 s (as a roll's seal does at 1.8 GB/s), then
prints the write latency percentiles and how many writes took over 25 and 250 ms.

  usage: bench-harness/sync-stalls.py DIR [SECONDS] [MODE] [SYNC]
    MODE: fallocate  blocks go into 32 MiB posix_fallocate steps (unwritten extents,
                     as Skein's reservations; the default)
          overwrite  the file is written through first, then overwritten
    SYNC: 1 (default) an fdatasync every 0.6 s; 0 none

On ext4 a write into an unwritten extent converts it at completion under a journal
handle, and an fdatasync forces a journal commit those conversions wait for: compare
`fallocate 1` with `fallocate 0` and `overwrite 1` (bench-harness/RESULTS.md, "The
publish maximum at 1 partition, max rate"). Writes up to 6 GiB; the file is removed.
PAUSE_SECS (default 30) is how long `overwrite` waits after its pre-write and sync,
for the host to write back what the pre-write left dirty.
"""
import mmap
import os
import sys
import threading
import time

BLOCK = 512 << 10
SIZE = 6 << 30
STEP = 32 << 20
THREADS = 8


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        sys.exit(2)
    directory = sys.argv[1]
    secs = float(sys.argv[2]) if len(sys.argv) > 2 else 8.0
    mode = sys.argv[3] if len(sys.argv) > 3 else "fallocate"
    sync = (sys.argv[4] if len(sys.argv) > 4 else "1") == "1"
    if mode not in ("fallocate", "overwrite"):
        print(f"unknown mode {mode}: fallocate or overwrite", file=sys.stderr)
        sys.exit(2)
    path = os.path.join(directory, f"sync-stalls.{os.getpid()}")
    fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_DIRECT, 0o644)
    try:
        if mode == "overwrite":
            block = mmap.mmap(-1, BLOCK)
            block.write(b"y" * BLOCK)
            for position in range(0, SIZE, BLOCK):
                os.pwrite(fd, block, position)
            os.fdatasync(fd)
            time.sleep(float(os.environ.get("PAUSE_SECS", "30")))  # let the host drain what the pre-write left
        lock = threading.Lock()
        state = {"next": 0, "latencies": []}
        stop = time.time() + secs

        def writer():
            block = mmap.mmap(-1, BLOCK)
            block.write(b"x" * BLOCK)
            while time.time() < stop:
                with lock:
                    position = state["next"]
                    if position >= SIZE:
                        return
                    state["next"] += BLOCK
                    if mode == "fallocate" and position % STEP == 0:
                        os.posix_fallocate(fd, position, STEP)
                started = time.perf_counter()
                os.pwrite(fd, block, position)
                took = time.perf_counter() - started
                with lock:
                    state["latencies"].append(took)

        threads = [threading.Thread(target=writer) for _ in range(THREADS)]
        began = time.time()
        for t in threads:
            t.start()
        while time.time() < stop and any(t.is_alive() for t in threads):
            time.sleep(0.6)
            if sync:
                os.fdatasync(fd)
        for t in threads:
            t.join()
        elapsed = time.time() - began
    finally:
        os.close(fd)
        os.unlink(path)
    lat = sorted(state["latencies"])
    n = len(lat)
    if n == 0:
        print("no writes completed", file=sys.stderr)
        sys.exit(1)
    ms = lambda q: lat[min(n - 1, int(n * q))] * 1e3
    print(f"{mode} sync={int(sync)}: {n} writes, {n * BLOCK / elapsed / 1e6:.0f} MB/s, "
          f"p50 {ms(0.5):.2f} p99 {ms(0.99):.2f} p99.9 {ms(0.999):.1f} max {lat[-1] * 1e3:.1f} ms, "
          f"{sum(x > 0.025 for x in lat)} over 25 ms, {sum(x > 0.25 for x in lat)} over 250 ms")


if __name__ == "__main__":
    main()
