// parallel/layout — the layout's communicators and the hosts its ranks run
// on (the arithmetic is layout.c's).
#include "parallel/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"

int layout_init(Layout *l, Comm *world, Err *err) {
    l->world = l->dpg = l->tpg = l->ppg = NULL;
    int n = comm_size(world), dp = l->dp, tp = l->tp, pp = l->pp;
    if (dp < 1 || tp < 1 || pp < 1 || (long long)dp * tp * pp != n)
        return err_set(err, ERR_USAGE, "dp %d × tp %d × pp %d = %lld ranks, but %d were started", dp, tp, pp,
                       (long long)dp * tp * pp, n);
    l->world = world;
    layout_place(l, comm_rank(world));
    if (comm_split(world, l->pp_rank * dp + l->dp_rank, l->tp_rank, "tp", &l->tpg, err) ||
        comm_split(world, l->pp_rank * tp + l->tp_rank, l->dp_rank, "dp", &l->dpg, err) ||
        comm_split(world, l->dp_rank * tp + l->tp_rank, l->pp_rank, "pp", &l->ppg, err)) {
        layout_free(l);
        return -1;
    }
    return 0;
}

void layout_free(Layout *l) {
    comm_free(l->tpg);
    comm_free(l->dpg);
    comm_free(l->ppg);
    l->tpg = l->dpg = l->ppg = NULL;
}

// The hosts' ranks, as runs: "a: ranks 0-3, b: ranks 4-7".
static size_t describe_hosts(const char *names, int name_len, const int *host, int n, int nh, char *buf, size_t cap) {
    size_t len = 0;
    for (int h = 0; h < nh && len < cap; h++) {
        int first = 1;
        for (int r = 0; r < n && len < cap; r++) {
            if (host[r] != h) continue;
            int end = r;
            while (end + 1 < n && host[end + 1] == h) end++;
            if (first) len += (size_t)snprintf(buf + len, cap - len, "%s%s: ranks ", h ? ", " : "", names + (size_t)r * name_len);
            len += (size_t)snprintf(buf + len, cap - len, first ? (end > r ? "%d-%d" : "%d") : (end > r ? ",%d-%d" : ",%d"), r, end);
            first = 0;
            r = end;
        }
    }
    return len < cap ? len : cap;
}

// Which kinds of group stay inside one host (all their groups do) and which
// cross hosts, appended to buf at len.
static void describe_groups(const Layout *l, const int *host, int n, char *buf, size_t len, size_t cap) {
    static const char *kind[3] = {"data-parallel", "tensor-parallel", "pipeline"};
    int inside[3] = {1, 1, 1};
    for (int r = 0; r < n; r++)
        for (int q = 0; q < n; q++) {
            int d1, t1, p1, d2, t2, p2;
            layout_coords(l, r, &d1, &t1, &p1);
            layout_coords(l, q, &d2, &t2, &p2);
            if (host[r] == host[q]) continue;
            if (t1 == t2 && p1 == p2) inside[0] = 0;   // the same data-parallel group
            if (d1 == d2 && p1 == p2) inside[1] = 0;
            if (d1 == d2 && t1 == t2) inside[2] = 0;
        }
    int sizes[3] = {l->dp, l->tp, l->pp};
    char in[96] = "", out[96] = "";
    for (int k = 0; k < 3; k++) {
        if (sizes[k] == 1) continue;
        char *d = inside[k] ? in : out;
        size_t dl = strlen(d);
        snprintf(d + dl, sizeof in - dl, "%s%s", dl ? ", " : "", kind[k]);
    }
    if (len < cap) len += (size_t)snprintf(buf + len, cap - len, ")");
    if (in[0] && len < cap) len += (size_t)snprintf(buf + len, cap - len, "; inside one host: %s groups", in);
    if (out[0] && len < cap) snprintf(buf + len, cap - len, "; across hosts: %s groups", out);
}

int layout_hosts(const Layout *l, Comm *c, char *buf, size_t cap, Err *err) {
    enum { NAME = 64 };
    int n = layout_devices(l);
    char mine[NAME] = "";
    gethostname(mine, NAME - 1);
    char *all = calloc((size_t)n, NAME);
    int *host = calloc((size_t)n, sizeof *host);
    if (!all || !host) { free(all); free(host); return err_set(err, ERR_RUN, "out of memory"); }
    int rc = comm_allgather(c, mine, all, NAME, DT_U8, err), nh = 0;
    for (int r = 0; !rc && r < n; r++) {   // host ids in order of first rank
        int h = 0;
        while (h < r && strncmp(all + (size_t)h * NAME, all + (size_t)r * NAME, NAME)) h++;
        host[r] = h < r ? host[h] : nh++;
    }
    buf[0] = 0;
    if (!rc && nh > 1) {
        size_t len = (size_t)snprintf(buf, cap, "%d (", nh);
        if (len < cap) len += describe_hosts(all, NAME, host, n, nh, buf + len, cap - len);
        describe_groups(l, host, n, buf, len, cap);
    }
    free(all);
    free(host);
    return rc;
}
