/*
 * rc_exchange.c - two processes, one RC queue pair each, connected by hand.
 *
 * A starting point for verbs programs: everything rdma_cm would do for you
 * is done here explicitly, so you can see it.
 *
 *   server:  rc_exchange -d rxe0 -g 1
 *   client:  rc_exchange -d rxe0 -g 1 SERVER_ADDR
 *
 * Both sides: open the device, allocate a protection domain (PD), create
 * completion queues (CQs) and a reliable-connected (RC) queue pair (QP),
 * register a buffer (MR), then swap {qpn, psn, gid, rkey, addr, size} over a
 * plain TCP socket and move the QP RESET -> INIT -> RTR -> RTS with what the
 * peer sent. Then, for each iteration, the client RDMA-WRITEs a known pattern
 * straight into the server's buffer and SENDs the pattern's checksum; the
 * server checks every byte and answers with a SEND, which is the client's
 * cue to go on. One-sided WRITE, two-sided SEND/RECV, in one small program.
 *
 * Build: cc -O2 -Wall -Wextra -o rc_exchange rc_exchange.c -libverbs
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CONNECT_TIMEOUT_MS 5000 /* a wrong server address fails this fast */
#define TCP_TIMEOUT_S 30        /* a peer that stops talking mid-exchange */
#define COMPLETION_TIMEOUT_S 20 /* a completion that never comes */
#define MSG_BYTES 8             /* a SEND carries {iteration, checksum} */

enum { WR_WRITE = 1, WR_SEND, WR_RECV }; /* wr_id: which request completed */

/* What each side tells the other: enough to address its QP and its memory. */
struct peer_info {
    uint32_t qpn;       /* queue pair number */
    uint32_t psn;       /* first packet sequence number it will send */
    union ibv_gid gid;  /* RoCE address of its port (an IPv6 address) */
    uint32_t rkey;      /* remote key of its buffer: permission to WRITE it */
    uint64_t addr;      /* virtual address of its buffer */
    uint32_t size;      /* bytes in its buffer */
};
#define MAGIC "RCX1" /* first on the wire: is the peer rc_exchange at all? */
#define WIRE_BYTES (4 + 4 + 4 + 16 + 4 + 8 + 4)

/* Every failure ends here: one line naming the step, then exit non-zero.
 * The OS reclaims verbs objects of an exiting process, so no cleanup. */
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("rc_exchange: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

/* ---- the TCP side channel ------------------------------------------------ */

static void send_all(int fd, const void *buf, size_t len, const char *what)
{
    for (const char *p = buf; len > 0;) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            die("%s: send: %s", what, strerror(errno));
        p += n, len -= (size_t)n;
    }
}

static void recv_all(int fd, void *buf, size_t len, const char *what)
{
    for (char *p = buf; len > 0;) {
        ssize_t n = recv(fd, p, len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            die("%s: peer sent nothing for %d s", what, TCP_TIMEOUT_S);
        if (n < 0)
            die("%s: recv: %s", what, strerror(errno));
        if (n == 0)
            die("%s: peer closed the connection", what);
        p += n, len -= (size_t)n;
    }
}

/* Server: wait for one client on TCP port `port`. */
static int tcp_accept(int port)
{
    int one = 1, lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port),
                              .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (lfd < 0)
        die("socket: %s", strerror(errno));
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(lfd, (struct sockaddr *)&sin, sizeof sin) < 0)
        die("bind TCP port %d: %s", port, strerror(errno));
    if (listen(lfd, 1) < 0)
        die("listen: %s", strerror(errno));
    printf("rc_exchange: listening on port %d\n", port); /* harnesses wait for this */
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0)
        die("accept: %s", strerror(errno));
    close(lfd);
    return fd;
}

/* Client: connect to host:port, giving up after CONNECT_TIMEOUT_MS. A plain
 * connect() to an address nobody answers for can block for minutes, so the
 * socket is non-blocking while connecting and poll() bounds the wait. */
static int tcp_connect(const char *host, int port)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
    char service[8];
    snprintf(service, sizeof service, "%d", port);
    int rc = getaddrinfo(host, service, &hints, &ai);
    if (rc != 0)
        die("resolve %s: %s", host, gai_strerror(rc));
    int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0)
        die("socket: %s", strerror(errno));
    fcntl(fd, F_SETFL, O_NONBLOCK);
    int err = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        err = errno;
        if (err == EINPROGRESS) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            rc = poll(&pfd, 1, CONNECT_TIMEOUT_MS);
            if (rc == 0)
                die("connect to %s:%d: no answer within %d s", host, port, CONNECT_TIMEOUT_MS / 1000);
            socklen_t len = sizeof err;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len); /* the connect's own result */
        }
    }
    if (err != 0)
        die("connect to %s:%d: %s", host, port, strerror(err));
    fcntl(fd, F_SETFL, 0);
    freeaddrinfo(ai);
    return fd;
}

/* peer_info on the wire: a magic word, then the fields in a fixed layout,
 * integers in network byte order, so the two sides need not share a compiler
 * or an endianness. Check what arrives: whatever answers on the port (a
 * proxy, another service) would otherwise be taken for a QP and a key. */
static void exchange(int fd, const struct peer_info *me, struct peer_info *peer)
{
    unsigned char out[WIRE_BYTES], in[WIRE_BYTES], *p = out;
    uint32_t v32;
    uint64_t v64;
#define PUT(val, n) (memcpy(p, (val), (n)), p += (n))
    PUT(MAGIC, 4);
    v32 = htonl(me->qpn), PUT(&v32, 4);
    v32 = htonl(me->psn), PUT(&v32, 4);
    PUT(me->gid.raw, 16); /* a GID is already a byte string */
    v32 = htonl(me->rkey), PUT(&v32, 4);
    v64 = htobe64(me->addr), PUT(&v64, 8);
    v32 = htonl(me->size), PUT(&v32, 4);
    send_all(fd, out, sizeof out, "send QP info");
    recv_all(fd, in, sizeof in, "receive QP info");
    if (memcmp(in, MAGIC, 4) != 0)
        die("receive QP info: the peer is not rc_exchange (it sent \"%.4s...\")", (const char *)in);
    p = in + 4;
#define GET(dst, n) (memcpy((dst), p, (n)), p += (n))
    GET(&v32, 4), peer->qpn = ntohl(v32);
    GET(&v32, 4), peer->psn = ntohl(v32);
    GET(peer->gid.raw, 16);
    GET(&v32, 4), peer->rkey = ntohl(v32);
    GET(&v64, 8), peer->addr = be64toh(v64);
    GET(&v32, 4), peer->size = ntohl(v32);
}

/* ---- verbs helpers ------------------------------------------------------- */

static void print_info(const char *who, const struct peer_info *i)
{
    char gid[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, i->gid.raw, gid, sizeof gid); /* RoCE v2 GIDs are IPv6 addresses */
    printf("rc_exchange: %s QPN 0x%06x PSN 0x%06x GID %s rkey 0x%08x addr 0x%016llx\n", who, i->qpn,
           i->psn, gid, i->rkey, (unsigned long long)i->addr);
}

/* Waits for the next completion on `cq` and checks it is the one expected.
 * ibv_poll_cq never blocks: it returns 0 while nothing has completed, so we
 * spin, with a deadline so a lost peer cannot hang us. Once a second we also
 * look at the TCP connection `fd`: a peer that failed has exited, and its
 * end of the connection is closed, so there is no point waiting for it. */
static struct ibv_wc wait_completion(struct ibv_cq *cq, int fd, uint64_t wr_id, const char *what)
{
    struct ibv_wc wc;
    time_t checked = time(NULL), deadline = checked + COMPLETION_TIMEOUT_S;
    int n;
    while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {
        time_t now = time(NULL);
        if (now > deadline)
            die("%s: no completion within %d s", what, COMPLETION_TIMEOUT_S);
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (now != checked && poll(&pfd, 1, 0) > 0) /* nothing else is due on it: EOF */
            die("%s: the peer closed the connection (its own output says why)", what);
        checked = now;
    }
    if (n < 0)
        die("%s: ibv_poll_cq failed", what);
    if (wc.status != IBV_WC_SUCCESS) /* the request failed: the status says why */
        die("%s: completion status %s (%d)", what, ibv_wc_status_str(wc.status), wc.status);
    if (wc.wr_id != wr_id)
        die("%s: completion of request %llu, expected %llu", what, (unsigned long long)wc.wr_id,
            (unsigned long long)wr_id);
    return wc;
}

/* Posts one RECV for a message of MSG_BYTES into `slot`. Two-sided traffic
 * needs the receiver to post first: a SEND that finds no RECV is refused
 * ("receiver not ready") and retried. */
static void post_recv(struct ibv_qp *qp, struct ibv_mr *mr, void *slot)
{
    struct ibv_sge sge = {.addr = (uintptr_t)slot, .length = MSG_BYTES, .lkey = mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = WR_RECV, .sg_list = &sge, .num_sge = 1}, *bad;
    int rc = ibv_post_recv(qp, &wr, &bad);
    if (rc)
        die("ibv_post_recv: %s", strerror(rc));
}

/* Posts a SEND of the MSG_BYTES in `slot`, after the WRITE `first` if given.
 * Chained requests run in order on an RC QP: when the SEND arrives, the bytes
 * of the WRITE before it are already in the peer's memory. */
static void post_send(struct ibv_qp *qp, struct ibv_mr *mr, void *slot, struct ibv_send_wr *first)
{
    struct ibv_sge sge = {.addr = (uintptr_t)slot, .length = MSG_BYTES, .lkey = mr->lkey};
    struct ibv_send_wr wr = {.wr_id = WR_SEND, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *bad;
    if (first)
        first->next = &wr;
    int rc = ibv_post_send(qp, first ? first : &wr, &bad);
    if (rc)
        die("ibv_post_send: %s", strerror(rc));
}

/* ---- the data ------------------------------------------------------------ */

static uint8_t pattern(size_t i, uint32_t iter) { return (uint8_t)((i * 7 + iter) & 0xff); }

static uint32_t checksum(const uint8_t *buf, size_t len) /* 32-bit FNV-1a */
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++)
        h = (h ^ buf[i]) * 16777619u;
    return h;
}

static void usage(void)
{
    fprintf(stderr, "usage: rc_exchange -d DEV -g GID_INDEX [-i IB_PORT] [-p TCP_PORT] [-s SIZE] [-n ITERS] "
                    "[SERVER_ADDR]\n  without SERVER_ADDR it is the server\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *dev_name = NULL, *server_addr = NULL;
    int gid_index = -1, ib_port = 1, tcp_port = 18600, opt;
    long size = 4096, iters = 16;
    while ((opt = getopt(argc, argv, "d:g:i:p:s:n:")) != -1) {
        switch (opt) {
        case 'd': dev_name = optarg; break;
        case 'g': gid_index = atoi(optarg); break;
        case 'i': ib_port = atoi(optarg); break;
        case 'p': tcp_port = atoi(optarg); break;
        case 's': size = atol(optarg); break;
        case 'n': iters = atol(optarg); break;
        default: usage();
        }
    }
    if (optind < argc)
        server_addr = argv[optind++];
    if (!dev_name || gid_index < 0 || optind != argc || size < 1 || size > (1L << 30) || iters < 1)
        usage();
    bool is_client = server_addr != NULL;
    setvbuf(stdout, NULL, _IOLBF, 0); /* line by line, even into a pipe */

    /* 1. Open the device by name and learn about the port we will use. */
    struct ibv_device **devs = ibv_get_device_list(NULL);
    if (!devs)
        die("ibv_get_device_list: %s", strerror(errno));
    struct ibv_device *dev = NULL;
    for (int i = 0; devs[i]; i++)
        if (strcmp(ibv_get_device_name(devs[i]), dev_name) == 0)
            dev = devs[i];
    if (!dev)
        die("no RDMA device named %s (ibv_devices lists them)", dev_name);
    struct ibv_context *ctx = ibv_open_device(dev);
    if (!ctx)
        die("ibv_open_device %s: %s", dev_name, strerror(errno));
    struct ibv_port_attr port;
    if (ibv_query_port(ctx, ib_port, &port))
        die("ibv_query_port %s port %d: %s", dev_name, ib_port, strerror(errno));
    if (port.state != IBV_PORT_ACTIVE)
        die("%s port %d is %s, not ACTIVE", dev_name, ib_port, ibv_port_state_str(port.state));
    struct peer_info me = {0}, peer;
    if (ibv_query_gid(ctx, ib_port, gid_index, &me.gid))
        die("ibv_query_gid %s port %d index %d: %s", dev_name, ib_port, gid_index, strerror(errno));
    static const union ibv_gid no_gid;
    if (memcmp(&me.gid, &no_gid, sizeof no_gid) == 0)
        die("GID index %d of %s port %d is empty", gid_index, dev_name, ib_port);

    /* 2. PD, CQs, QP. The PD ties the QP and the MR together; each queue of
     * the QP reports into its own CQ, so each wait below knows what comes. */
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    if (!pd)
        die("ibv_alloc_pd: %s", strerror(errno));
    struct ibv_cq *send_cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
    struct ibv_cq *recv_cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
    if (!send_cq || !recv_cq)
        die("ibv_create_cq: %s", strerror(errno));
    struct ibv_qp_init_attr qp_init = {
        .send_cq = send_cq, .recv_cq = recv_cq, .qp_type = IBV_QPT_RC,
        .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
    };
    struct ibv_qp *qp = ibv_create_qp(pd, &qp_init);
    if (!qp)
        die("ibv_create_qp: %s", strerror(errno));

    /* 3. Register the buffer: `size` bytes the peer may WRITE, then one small
     * slot for the messages we SEND and RECV. Registration pins the pages and
     * gives an lkey (for our own requests) and an rkey (for the peer's). */
    uint8_t *buf;
    if (posix_memalign((void **)&buf, 4096, (size_t)size + MSG_BYTES))
        die("posix_memalign %ld bytes: out of memory", size);
    memset(buf, 0, (size_t)size + MSG_BYTES);
    /* {iteration, checksum}: what we SEND and where we RECV. One slot is
     * enough because each message is answered only after the last one left. */
    uint32_t *msg = (uint32_t *)(buf + size);
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, (size_t)size + MSG_BYTES,
                                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!mr)
        die("ibv_reg_mr %ld bytes: %s", size, strerror(errno));

    /* 4. RESET -> INIT: which port, and what the peer may do to our memory. */
    struct ibv_qp_attr attr = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = (uint8_t)ib_port,
                               .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
    int rc = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc)
        die("modify QP 0x%x RESET -> INIT: %s", qp->qp_num, strerror(rc));

    /* 5. Swap addresses over TCP. The PSN is random so that packets of an
     * old connection cannot pass as packets of this one. */
    srand48(getpid() ^ time(NULL));
    me.qpn = qp->qp_num;
    me.psn = (uint32_t)lrand48() & 0xffffff; /* PSNs are 24 bits */
    me.rkey = mr->rkey;
    me.addr = (uintptr_t)buf;
    me.size = (uint32_t)size;
    int fd = is_client ? tcp_connect(server_addr, tcp_port) : tcp_accept(tcp_port);
    struct timeval tv = {.tv_sec = TCP_TIMEOUT_S};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    exchange(fd, &me, &peer);
    print_info("local ", &me);
    print_info("remote", &peer);
    if (peer.size != me.size)
        die("the peer's buffer is %u bytes, ours %u: give both sides the same -s", peer.size, me.size);

    /* 6. INIT -> RTR (ready to receive): who the peer is. On RoCE the peer
     * is addressed by its GID, carried in a global route header (GRH), so
     * is_global = 1 and sgid_index picks which of our GIDs is the source. */
    memset(&attr, 0, sizeof attr);
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = port.active_mtu;   /* largest payload per packet on this link */
    attr.dest_qp_num = peer.qpn;       /* the QP our packets go to */
    attr.rq_psn = peer.psn;            /* the first PSN we expect from it */
    attr.max_dest_rd_atomic = 1;       /* RDMA READs/atomics it may have in flight at us */
    attr.min_rnr_timer = 12;           /* how long a sender should wait if we lack a RECV */
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = peer.gid;
    attr.ah_attr.grh.sgid_index = (uint8_t)gid_index;
    attr.ah_attr.grh.hop_limit = 64;
    attr.ah_attr.port_num = (uint8_t)ib_port;
    rc = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc)
        die("modify QP 0x%x INIT -> RTR: %s", qp->qp_num, strerror(rc));

    /* 7. RTR -> RTS (ready to send): our own sending side. */
    memset(&attr, 0, sizeof attr);
    attr.qp_state = IBV_QPS_RTS;
    attr.sq_psn = me.psn;    /* the PSN we told the peer we would start at */
    attr.timeout = 14;       /* ACK timeout: 4.096 us * 2^14 = 67 ms */
    attr.retry_cnt = 7;      /* resends after a timeout before giving up */
    attr.rnr_retry = 7;      /* resends after "receiver not ready"; 7 = forever */
    attr.max_rd_atomic = 1;  /* our RDMA READs/atomics in flight */
    rc = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc)
        die("modify QP 0x%x RTR -> RTS: %s", qp->qp_num, strerror(rc));
    printf("rc_exchange: QP 0x%x INIT -> RTR -> RTS (path MTU %d)\n", qp->qp_num,
           128 << port.active_mtu);

    /* 8. Post the first RECV, then tell the peer over TCP that we have; only
     * when both sides have done so does any SEND start. */
    post_recv(qp, mr, msg);
    char ready = 'R';
    send_all(fd, &ready, 1, "send ready");
    recv_all(fd, &ready, 1, "wait for the peer to be ready");

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (uint32_t iter = 0; iter < (uint32_t)iters; iter++) {
        if (is_client) {
            /* Client: WRITE the pattern into the server's buffer, then SEND
             * its checksum; wait for both, then for the server's answer. */
            for (long i = 0; i < size; i++)
                buf[i] = pattern((size_t)i, iter);
            msg[0] = htonl(iter);
            msg[1] = htonl(checksum(buf, (size_t)size));
            struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = (uint32_t)size, .lkey = mr->lkey};
            struct ibv_send_wr write = {.wr_id = WR_WRITE, .sg_list = &sge, .num_sge = 1,
                                        .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
                                        .wr.rdma = {.remote_addr = peer.addr, .rkey = peer.rkey}};
            post_send(qp, mr, msg, &write);
            wait_completion(send_cq, fd, WR_WRITE, "RDMA WRITE");
            wait_completion(send_cq, fd, WR_SEND, "SEND checksum");
            wait_completion(recv_cq, fd, WR_RECV, "RECV the server's answer");
            if (ntohl(msg[0]) != iter)
                die("iteration %u: the server answered for iteration %u", iter, ntohl(msg[0]));
            if (iter + 1 < (uint32_t)iters)
                post_recv(qp, mr, msg);
        } else {
            /* Server: the RECV completes once the client's SEND lands, and by
             * then its WRITE has too. Check the bytes, then answer. */
            struct ibv_wc wc = wait_completion(recv_cq, fd, WR_RECV, "RECV checksum");
            if (wc.byte_len != MSG_BYTES || ntohl(msg[0]) != iter)
                die("iteration %u: unexpected message (%u bytes, iteration %u)", iter, wc.byte_len,
                    ntohl(msg[0]));
            for (long i = 0; i < size; i++)
                if (buf[i] != pattern((size_t)i, iter))
                    die("iteration %u: first difference at offset %ld: 0x%02x, expected 0x%02x", iter, i, buf[i],
                        pattern((size_t)i, iter));
            if (checksum(buf, (size_t)size) != ntohl(msg[1]))
                die("iteration %u: checksum 0x%08x, the client sent 0x%08x", iter,
                    checksum(buf, (size_t)size), ntohl(msg[1]));
            if (iter + 1 < (uint32_t)iters)
                post_recv(qp, mr, msg); /* before answering: the client's next SEND needs it */
            post_send(qp, mr, msg, NULL); /* echoes {iteration, checksum} */
            wait_completion(send_cq, fd, WR_SEND, "SEND answer");
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    /* 9. Say goodbye over TCP, so that until now a closed connection always
     * meant a failed peer, never one that finished first. */
    send_all(fd, &ready, 1, "send done");
    recv_all(fd, &ready, 1, "wait for the peer to be done");
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("rc_exchange: %s %ld bytes in %ld iterations (%.3f s)\n", is_client ? "wrote" : "verified",
           size * iters, iters, secs);

    /* 10. Tear down in the reverse order of creation. */
    close(fd);
    ibv_destroy_qp(qp);
    ibv_dereg_mr(mr);
    free(buf);
    ibv_destroy_cq(send_cq);
    ibv_destroy_cq(recv_cq);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(devs);
    return 0;
}
