"""All-reduce of torch.distributed on the gloo backend, ranks as processes on loopback: the
reference for bench/allreduce_bench (same sizes, same iteration counts, same output columns).
Usage: /usr/bin/python3 allreduce_gloo.py RANKS"""
import os
import queue
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def sizes():
    b = 4 << 10
    while b <= 256 << 20:
        yield b
        b *= 4


def iterations(nbytes):
    return max(3, min(500, (1 << 29) // nbytes))


def rank_main(rank, n, port, q):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=n)
    for nbytes in sizes():
        t = torch.ones(nbytes // 4)
        for _ in range(2):
            dist.all_reduce(t)
        dist.barrier()
        iters = iterations(nbytes)
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        dt = (time.perf_counter() - t0) / iters
        if rank == 0:
            alg = nbytes / dt / 1e9
            q.put("%d %.9f %.3f %.3f" % (nbytes, dt, alg, alg * 2 * (n - 1) / n))
    if rank == 0:
        q.put(None)
    dist.destroy_process_group()


if __name__ == "__main__":
    n = int(sys.argv[1])
    port = 29500 + os.getpid() % 1000
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, n, port, q)) for r in range(n)]
    for p in procs:
        p.start()
    print("# bytes seconds algbw-GB/s busbw-GB/s (gloo all-reduce, %d ranks)" % n)
    while True:
        try:
            line = q.get(timeout=1)
        except queue.Empty:
            # A rank that died would leave the others (and this loop) waiting for ever.
            dead = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
            if dead:
                for p in procs:
                    p.kill()
                sys.exit("allreduce_gloo: rank %d exited with status %s" % dead[0])
            continue
        if line is None:
            break
        print(line, flush=True)
    for r, p in enumerate(procs):
        p.join()
        if p.exitcode != 0:
            sys.exit("allreduce_gloo: rank %d exited with status %s" % (r, p.exitcode))
