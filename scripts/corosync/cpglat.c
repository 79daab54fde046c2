/*
 * cpglat.c - one-way latency of Corosync CPG agreed-order messages at a light, paced load:
 * the peer figure beside `rmcast bench --rate R` (docs/PERFORMANCE.md, "The Ring beside
 * Corosync's Totem ring").
 *
 *   cpglat -n MEMBERS [-s] [-r RATE] [-t SECONDS] [-b BYTES] [-g GROUP] [-w MAXWAIT]
 *
 * Every process joins GROUP and waits until it has MEMBERS members. The one started with -s
 * multicasts BYTES-byte messages with cpg_mcast_joined(CPG_TYPE_AGREED), RATE a second for
 * SECONDS, each carrying its CLOCK_MONOTONIC send time, then an end marker. Every process (the
 * sender too: CPG delivers its own messages back to it) takes delivery time minus send time
 * for each message. The namespaces of one host share CLOCK_MONOTONIC, so this is one-way
 * latency, as rmcast bench measures it. Prints one line:
 *   delivered=N p50_us=.. p99_us=.. p999_us=.. max_us=..
 */
#define _GNU_SOURCE
#include <corosync/cpg.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAGIC 0x4c41544eu /* "LATN" */
#define MAX_SAMPLES 1000000

struct msg {
    uint32_t magic, end;
    uint64_t seq;
    int64_t sent_ns;
};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static size_t members;
static int ended;
static int64_t *lat;
static size_t nlat;

static void on_deliver(cpg_handle_t h, const struct cpg_name *g, uint32_t node, uint32_t pid, void *data,
                       size_t len) {
    (void)h, (void)g, (void)node, (void)pid;
    struct msg m;
    if (len < sizeof m) return;
    memcpy(&m, data, sizeof m);
    if (m.magic != MAGIC) return;
    if (m.end) {
        ended = 1;
        return;
    }
    if (nlat < MAX_SAMPLES) lat[nlat++] = now_ns() - m.sent_ns;
}

static void on_confchg(cpg_handle_t h, const struct cpg_name *g, const struct cpg_address *ml, size_t mn,
                       const struct cpg_address *ll, size_t ln, const struct cpg_address *jl, size_t jn) {
    (void)h, (void)g, (void)ml, (void)ll, (void)ln, (void)jl, (void)jn;
    members = mn;
}

static void pump(cpg_handle_t h, int fd, int ms) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, ms) > 0) cpg_dispatch(h, CS_DISPATCH_ALL);
}

static int cmp(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int64_t pct(double q) {
    if (!nlat) return 0;
    size_t i = (size_t)(q * (double)(nlat - 1) + 0.5);
    return lat[i];
}

int main(int argc, char **argv) {
    const char *gname = "cpglat";
    int nmem = 1, sender = 0, bytes = 64, c;
    double rate = 1000, secs = 5, maxwait = 60;
    while ((c = getopt(argc, argv, "n:sr:t:b:g:w:")) != -1) {
        switch (c) {
        case 'n': nmem = atoi(optarg); break;
        case 's': sender = 1; break;
        case 'r': rate = atof(optarg); break;
        case 't': secs = atof(optarg); break;
        case 'b': bytes = atoi(optarg); break;
        case 'g': gname = optarg; break;
        case 'w': maxwait = atof(optarg); break;
        default: fprintf(stderr, "usage: cpglat -n MEMBERS [-s] [-r RATE] [-t SECONDS] [-b BYTES]\n"); return 1;
        }
    }
    if (nmem < 1 || rate <= 0 || secs <= 0 || bytes > 65536) {
        fprintf(stderr, "cpglat: -n must be >= 1, -r and -t > 0, -b at most 65536\n");
        return 1;
    }
    if (bytes < (int)sizeof(struct msg)) bytes = sizeof(struct msg);
    lat = calloc(MAX_SAMPLES, sizeof *lat);
    char *buf = calloc(1, bytes);
    if (!lat || !buf) return 1;
    cpg_handle_t h;
    cpg_callbacks_t cb = {.cpg_deliver_fn = on_deliver, .cpg_confchg_fn = on_confchg};
    int64_t t0 = now_ns(), wait_ns = (int64_t)(maxwait * 1e9);
    cs_error_t r;
    while ((r = cpg_initialize(&h, &cb)) != CS_OK) { /* corosync may still be starting */
        if (now_ns() - t0 > wait_ns) {
            fprintf(stderr, "cpg_initialize: %d\n", r);
            return 2;
        }
        usleep(200000);
    }
    struct cpg_name grp;
    grp.length = strlen(gname);
    memcpy(grp.value, gname, grp.length);
    while ((r = cpg_join(h, &grp)) == CS_ERR_TRY_AGAIN) usleep(100000);
    if (r != CS_OK) {
        fprintf(stderr, "cpg_join: %d\n", r);
        return 2;
    }
    int fd;
    cpg_fd_get(h, &fd);
    while (members < (size_t)nmem) {
        if (now_ns() - t0 > wait_ns) {
            fprintf(stderr, "cpglat: %zu of %d members after %.0f s\n", members, nmem, maxwait);
            return 3;
        }
        pump(h, fd, 100);
    }
    struct msg *m = (struct msg *)buf;
    struct iovec iov = {.iov_base = buf, .iov_len = (size_t)bytes};
    if (sender) {
        usleep(500000); /* the others are past their own wait */
        int64_t start = now_ns(), gap = (int64_t)(1e9 / rate), total = (int64_t)(rate * secs);
        m->magic = MAGIC;
        for (int64_t i = 0; i < total; i++) {
            int64_t due = start + i * gap;
            while (now_ns() < due) pump(h, fd, (int)((due - now_ns()) / 1000000));
            m->seq = (uint64_t)i;
            m->sent_ns = now_ns();
            while ((r = cpg_mcast_joined(h, CPG_TYPE_AGREED, &iov, 1)) == CS_ERR_TRY_AGAIN) pump(h, fd, 1);
            if (r != CS_OK) {
                fprintf(stderr, "cpg_mcast_joined: %d\n", r);
                return 2;
            }
            cpg_dispatch(h, CS_DISPATCH_ALL);
        }
        m->end = 1;
        while ((r = cpg_mcast_joined(h, CPG_TYPE_AGREED, &iov, 1)) == CS_ERR_TRY_AGAIN) pump(h, fd, 1);
    }
    int64_t deadline = now_ns() + (int64_t)((secs + maxwait) * 1e9);
    while (!ended && now_ns() < deadline) pump(h, fd, 100);
    qsort(lat, nlat, sizeof *lat, cmp);
    printf("delivered=%zu p50_us=%.1f p99_us=%.1f p999_us=%.1f max_us=%.1f ended=%d\n", nlat, pct(0.5) / 1e3,
           pct(0.99) / 1e3, pct(0.999) / 1e3, nlat ? lat[nlat - 1] / 1e3 : 0.0, ended);
    cpg_leave(h, &grp);
    cpg_finalize(h);
    return ended ? 0 : 4;
}
