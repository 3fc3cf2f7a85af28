"""gunicorn's threaded worker, holding a bounded number of connections so that kept-alive clients spread over
the workers, and giving a connection up whenever a client waits to connect.

A kept-alive connection stays with the worker that accepted it. With gunicorn's default bound (1,000 a worker)
the 32 reviewers of bench/review_load.py sat 13, 15 and 4 on three workers, and their requests queued behind
the busiest worker's threads while another idled (docs/benchmarks/review_load.md). Bounding each worker to
`worker_connections` spreads them; gunicorn alone would then leave a client past workers x bound in the listen
queue until some kept-alive connection timed out (`keepalive` seconds, however idle). This worker, while it is
full and a client waits, answers each request with "Connection: close", and closes a connection idle for a
second or more (a reviewer reading the next pair). It never closes one idle for less: its client may be sending
the next request already, and would get a reset instead of an answer.

It does not refuse new connections while its threads are busy: that spread the bench's clients too, but left
the ones it refused waiting in the listen queue for seconds behind the kept-alive clients' requests (a mean
latency above the p99).
"""
import contextlib
import select
import time

from gunicorn.workers.gthread import ThreadWorker

# How often a full worker looks for a waiting client when nothing else wakes it (all its connections idle).
FULL_WORKER_POLL_SECONDS = 0.05
# A connection idle this long may be closed for a waiting client.
IDLE_SECONDS_BEFORE_HANDOVER = 1.0


def readable(sock) -> bool:
    """Whether `sock` has something to read now (poll, not select: any descriptor number); False once closed."""
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return any(events & select.POLLIN for _, events in poller.poll(0))
    except (OSError, ValueError):  # closed while the worker stops
        return False


class BalancedThreadWorker(ThreadWorker):
    def is_full(self) -> bool:
        return self.nr_conns >= self.worker_connections

    def clients_waiting(self) -> bool:
        """Whether a client waits in the listen queue: a listening socket is readable while one does."""
        return any(readable(listener) for listener in self.sockets)

    def wait_for_and_dispatch_events(self, timeout):
        if self.alive and self.is_full():
            idle = self.longest_idle()
            if idle is not None and self.clients_waiting():
                self.close_idle(*idle)
                self.set_accept_enabled(True)  # accept in this same wait; run() stops again once full
            timeout = min(timeout, FULL_WORKER_POLL_SECONDS)
        super().wait_for_and_dispatch_events(timeout)

    def longest_idle(self):
        """(queue, connection) of the connection idle longest, if it has been idle long enough to hand over.

        Both queues are in the order their connections went idle: kept-alive connections after an answer,
        pending ones when gunicorn set them aside (accepted, then silent for the 5 s a thread waits for a first
        request). A connection's `timeout` is that moment plus `keepalive`."""
        heads = [(queue, queue[0]) for queue in (self.keepalived_conns, self.pending_conns) if queue]
        if not heads:
            return None
        queue, conn = min(heads, key=lambda head: head[1].timeout)
        if time.monotonic() - (conn.timeout - self.cfg.keepalive) < IDLE_SECONDS_BEFORE_HANDOVER:
            return None
        if readable(conn.sock):  # its request came in since the last poll: the poller hands it to a thread
            return None
        return queue, conn

    def close_idle(self, queue, conn) -> None:
        queue.remove(conn)
        with contextlib.suppress(OSError, KeyError, ValueError):  # already off the poller
            self.poller.unregister(conn.sock)
        self.nr_conns -= 1
        conn.close()

    def handle_request(self, req, conn):
        # Runs in a request thread; the counts it reads are the main loop's and may be a step old, which only
        # moves the hand-over by one request.
        if self.is_full() and self.clients_waiting():
            req.force_close()  # the response says "Connection: close", so the client knows to reconnect
        return super().handle_request(req, conn)
